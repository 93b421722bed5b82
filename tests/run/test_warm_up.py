"""A run's time is its own: the process's first run of a cell warms up before its clock starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from wdrbo_dist.run import loop
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.run.spec import RunSpec

FAST = {"num_restarts": 2, "raw_samples": 32, "batch_limit": 32}

# Four runs of one cell in a fresh process: their wall times and warm-ups, as JSON.
FRESH_PROCESS = """
import json
from wdrbo_dist.execution.task import set_threads
from wdrbo_dist.run.loop import run_one
from wdrbo_dist.run.spec import RunSpec
set_threads(1)
out = []
for seed in (1, 2, 3, 4):
    r = run_one(RunSpec(algorithm="gp-ucb", problem="ackley", seed=seed, evaluations=20, init_size=5))
    out.append([r.status, r.wall_time_s, r.warm_up_s])
print(json.dumps(out))
"""


def test_the_first_run_in_a_fresh_process_takes_as_long_as_the_next_ones() -> None:
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=300, check=True)
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert [status for status, _, _ in runs] == ["FINISHED"] * 4
    walls = [wall for _, wall, _ in runs]
    warm_ups = [warm for _, _, warm in runs]
    # Unwarmed, the first run took about a second more than the others' ~0.2 s (lazy imports,
    # first calls); warmed, it is within the others' spread.
    assert warm_ups[0] > 0.0 and warm_ups[1:] == [0.0, 0.0, 0.0]
    assert walls[0] <= 1.5 * max(walls[1:]) + 0.05, walls


def test_the_warm_up_changes_no_record() -> None:
    spec = RunSpec.make(options=FAST, algorithm="wdrbo", problem="newsvendor", seed=5, evaluations=9, init_size=4)
    loop._WARMED.discard((spec.algorithm, spec.problem, spec.fidelity, spec.device))
    warmed_first = loop.run_one(spec, capture_errors=False)
    again = loop.run_one(spec, capture_errors=False)
    assert warmed_first.warm_up_s > 0.0 and again.warm_up_s == 0.0
    pd.testing.assert_frame_equal(deterministic_part(warmed_first.records), deterministic_part(again.records),
                                  check_exact=True)

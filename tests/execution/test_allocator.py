"""`keep_freed_memory`: a BO process reuses its freed memory instead of faulting it in again,
and computes exactly what it computed without it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

FAULTS = """
import json, resource, sys
import numpy as np
from wdrbo_dist.execution.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "kept" else False
def cycle():  # arrays of a BO step's sizes, allocated and freed in turn
    for megabytes in (24, 3, 12, 6, 20, 1):
        array = np.ones(megabytes * 2**20 // 8)
        del array
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    cycle()
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""

RECORDS = """
import sys
from wdrbo_dist.execution.allocator import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
import torch
torch.set_num_threads(1)
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one
spec = RunSpec(algorithm="sbo-kde", problem="modified-branin", seed=3, evaluations=9, init_size=5,
               options=(("num_restarts", 2), ("raw_samples", 64)))
import pandas as pd
records = deterministic_part(run_one(spec).records)
print(len(records), pd.util.hash_pandas_object(records).values.tobytes().hex())  # every bit of every value
"""


def _child(script: str, mode: str) -> str:
    return subprocess.run([sys.executable, "-c", script, mode], check=True, capture_output=True, text=True).stdout


def test_freed_arrays_are_reused_without_page_faults() -> None:
    default = json.loads(_child(FAULTS, "default"))
    kept = json.loads(_child(FAULTS, "kept"))
    assert kept["kept"] and not default["kept"]
    assert kept["faults"] < 16 <= default["faults"], (default, kept)


def test_the_records_are_the_same_with_the_memory_kept() -> None:
    assert _child(RECORDS, "kept") == _child(RECORDS, "default")

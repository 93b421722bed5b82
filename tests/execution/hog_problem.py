"""A run that takes memory until something kills its process: a memory-kill test that holds
whatever else the machine's memory does meanwhile (other work freeing memory cannot keep it
below a threshold, as a fixed amount could).

It counts its attempt (its pid to $WDRBO_TEST_ATTEMPTS, as raising_problem.py's problems do) and
starts to grow first thing, before the run's imports. Ray workers register it through `register`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from raising_problem import count_attempt

from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.problems.camel import ThreeHumpCamel

STEP_MIB = 128  # taken every 50 ms: Ray's monitor (every 100 ms) sees it pass its threshold by little
KEEP_FREE_GIB = 1.0  # never take the machine below this: the kernel's own OOM killer would pick anyone
GIVE_UP_S = 120.0


class GrowingProblem(ThreeHumpCamel):
    """The problem of the growing run (its run grows before it computes anything)."""

    name: ClassVar[str] = "grows"


def available_gib() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(info["MemAvailable"].split()[0]) / 2**20


def grow_until_killed() -> None:
    import numpy as np

    held, deadline = [], time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        if available_gib() > KEEP_FREE_GIB + STEP_MIB / 1024:
            held.append(np.ones(STEP_MIB * 2**17))  # float64, written: resident
        time.sleep(0.05)
    raise MemoryError(f"nothing killed this process in {GIVE_UP_S:g} s; it holds {len(held) * STEP_MIB} MiB")


def register() -> None:
    PROBLEMS["grows"] = GrowingProblem


def run_registered(spec):
    """The study's run function, with this problem registered where it runs; a run of it grows."""
    from wdrbo_dist.driver.study import run_captured

    register()
    if spec.problem == "grows":
        count_attempt()
        grow_until_killed()
    return run_captured(spec)

"""Problems whose truth computation raises or ends the process, for failure tests that cross
process boundaries.

Ray workers register them through a `worker_process_setup_hook` (`register_every_problem`, the
hook of the Ray the tests here share); each attempt appends its process id to the file named by
$WDRBO_TEST_ATTEMPTS, so a test can count how often the run was tried.
"""

from __future__ import annotations

import os
from typing import ClassVar

from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.problems.camel import ThreeHumpCamel

ATTEMPTS_ENV = "WDRBO_TEST_ATTEMPTS"


def count_attempt() -> None:
    """Append this process's id to the file named by $WDRBO_TEST_ATTEMPTS (if set)."""
    path = os.environ.get(ATTEMPTS_ENV)
    if path:
        with open(path, "a") as log:
            log.write(f"{os.getpid()}\n")


class RaisingProblem(ThreeHumpCamel):
    name: ClassVar[str] = "raises"

    def expected_value(self, x):
        count_attempt()
        raise FloatingPointError("the truth is not available today")


class DyingProblem(ThreeHumpCamel):
    """Its truth computation ends the process, as the out-of-memory killer would."""

    name: ClassVar[str] = "dies"

    def expected_value(self, x):
        count_attempt()
        os._exit(137)


class SleepingProblem(ThreeHumpCamel):
    """Its truth computation takes far longer than a run may (a run_timeout_s test)."""

    name: ClassVar[str] = "sleeps"

    def expected_value(self, x):
        count_attempt()
        import time

        time.sleep(600)


class MemoryHogProblem(ThreeHumpCamel):
    """Its truth computation takes memory until something kills its process."""

    name: ClassVar[str] = "hogs"

    def expected_value(self, x):
        count_attempt()
        import time

        import numpy as np

        held = [np.ones(2**27) for _ in range(int(os.environ.get("WDRBO_TEST_HOG_GB", "4")))]  # 1 GiB each
        time.sleep(600)
        return held


def register_all() -> None:
    PROBLEMS.update(raises=RaisingProblem, dies=DyingProblem, sleeps=SleepingProblem, hogs=MemoryHogProblem)


def register_every_problem() -> None:
    """The worker set-up hook of the Ray the tests here share (conftest.py): every problem of
    this folder, the hanging one (hanging_problem.py) too."""
    import hanging_problem

    register_all()
    hanging_problem.register()


def run_registered(spec):
    """The study's run function, with this module's problems registered in the process it runs
    in (a pool process imports this module to unpickle it)."""
    from wdrbo_dist.driver.study import run_captured

    register_all()
    return run_captured(spec)

"""Problems whose truth computation raises or ends the process, for failure tests that cross
process boundaries.

Ray workers register them through a `worker_process_setup_hook`; each attempt appends its process
id to the file named by $WDRBO_TEST_ATTEMPTS, so a test can count how often the run was tried.
"""

from __future__ import annotations

import os
from typing import ClassVar

from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.problems.camel import ThreeHumpCamel

ATTEMPTS_ENV = "WDRBO_TEST_ATTEMPTS"


class RaisingProblem(ThreeHumpCamel):
    name: ClassVar[str] = "raises"

    def expected_value(self, x):
        path = os.environ.get(ATTEMPTS_ENV)
        if path:
            with open(path, "a") as log:
                log.write(f"{os.getpid()}\n")
        raise FloatingPointError("the truth is not available today")


def register() -> None:
    PROBLEMS["raises"] = RaisingProblem


class DyingProblem(ThreeHumpCamel):
    """Its truth computation ends the process, as the out-of-memory killer would."""

    name: ClassVar[str] = "dies"

    def expected_value(self, x):
        path = os.environ.get(ATTEMPTS_ENV)
        if path:
            with open(path, "a") as log:
                log.write(f"{os.getpid()}\n")
        os._exit(137)


def register_dying() -> None:
    PROBLEMS["dies"] = DyingProblem

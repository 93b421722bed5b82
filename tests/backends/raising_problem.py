"""Problems whose truth computation raises or ends the process, for failure tests that cross
process boundaries.

Ray workers register them through a `worker_process_setup_hook`; each attempt appends its process
id to the file named by $WDRBO_TEST_ATTEMPTS, so a test can count how often the run was tried.
"""

from __future__ import annotations

import os
from pathlib import Path
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


def start_ray(hook: str, attempts: Path) -> None:
    """A local Ray for one test whose workers register a problem of this module through `hook`."""
    import ray

    here = str(Path(__file__).parent)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={
        "env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
                     ATTEMPTS_ENV: str(attempts)},
        "worker_process_setup_hook": f"raising_problem.{hook}",
    })


class RaisingProblem(ThreeHumpCamel):
    name: ClassVar[str] = "raises"

    def expected_value(self, x):
        count_attempt()
        raise FloatingPointError("the truth is not available today")


def register() -> None:
    PROBLEMS["raises"] = RaisingProblem


class DyingProblem(ThreeHumpCamel):
    """Its truth computation ends the process, as the out-of-memory killer would."""

    name: ClassVar[str] = "dies"

    def expected_value(self, x):
        count_attempt()
        os._exit(137)


def register_dying() -> None:
    PROBLEMS["dies"] = DyingProblem

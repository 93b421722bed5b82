"""What the driver and the command line hand each other: the console it is given (progress,
lines, Ctrl-C) and the `StudyReport` it returns, which decides the exit code."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from wdrbo_dist.driver.plan import Plan
from wdrbo_dist.errors import ExitCode
from wdrbo_dist.execution.task import Outcome, Task
from wdrbo_dist.run.spec import RunResult
from wdrbo_dist.study.spec import StudySpec

Echo = Callable[[str], None]


def silent(line: str) -> None:
    pass


class Watcher(Protocol):
    """What the command line shows of a study's outcomes as they come (a progress bar)."""

    def update(self, outcome: Outcome) -> None: ...

    def close(self) -> None: ...


class Guard(Protocol):
    """How Ctrl-C reaches the study loop (the command line's `CtrlC`): `taken` around the loop,
    `deferred` around settling one outcome, `cut_short` once a second Ctrl-C stopped one."""

    cut_short: bool

    def taken(self) -> AbstractContextManager[None]: ...

    def deferred(self) -> AbstractContextManager[None]: ...


class NoGuard:
    """Ctrl-C as Python raises it, wherever the loop is."""

    cut_short = False

    def taken(self) -> AbstractContextManager[None]:
        return nullcontext()

    def deferred(self) -> AbstractContextManager[None]:
        return nullcontext()


@dataclass
class StudyReport:
    """What a `run` did, for the end-of-study summary and the exit code."""

    study: StudySpec
    plan: Plan
    finished: list[RunResult] = field(default_factory=list)
    failed: list[RunResult] = field(default_factory=list)
    lost: list[Outcome] = field(default_factory=list)  # given up by the backend, not done
    cluster_gone: str | None = None  # why the backend stopped, when the cluster is gone
    write_error: str | None = None  # why the output folder could not be written; runs in flight cancelled
    kept_elsewhere: str = ""  # where the finished run that could not be stored was written instead
    interrupted: bool = False
    retried: bool = False  # a task ran more than once (an attempt may have left a RUNNING child run)
    wall_time_s: float = 0.0
    tracking_warnings: list[str] = field(default_factory=list)
    store_warning: str = ""  # why the finished runs could not be compacted at the end (they stay loose)
    runs_address: str = ""  # the study's runs in the MLflow UI, when tracked

    @property
    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if self.write_error:
            return ExitCode.IO_ERROR
        if self.cluster_gone or self.lost:
            return ExitCode.UNAVAILABLE
        return ExitCode.RUNS_FAILED if self.failed or self.plan.failed else ExitCode.OK

    @property
    def not_done(self) -> int:
        """Runs of this command's plan that neither finished nor failed."""
        return len(self.plan.todo) - len(self.finished) - len(self.failed)


@dataclass(frozen=True)
class Console:
    """What the command line brings: the progress watcher, the driver's lines and Ctrl-C."""

    progress: Callable[[Sequence[Task]], Watcher] | None
    echo: Echo
    ctrl_c: Guard

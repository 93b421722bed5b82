"""The unit every backend ships: a run spec plus how to run it, and what comes back.

A backend is handed the run function and an opaque hook by the driver: where a task lands,
`execute` calls `run(spec)`, then `hook(result)`; what the hook returns (or the error it
raised) comes back in the `Outcome`. What the run computes and what the hook does (the
study's tracker logs a child run there) are not the backend's business.
"""

from __future__ import annotations

import heapq
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from wdrbo_dist.execution.allocator import keep_freed_memory
from wdrbo_dist.run.spec import RunResult, RunSpec
from wdrbo_dist.execution.threads import THREAD_VARIABLES

# Both travel to the workers, so both must pickle (a module-level function, a partial of one,
# a dataclass instance). `run` records the run's own errors in its result and never raises.
RunFunction = Callable[[RunSpec], RunResult]
Hook = Callable[[RunResult], Any]


@dataclass(frozen=True)
class Task:
    """One run and its execution settings (picklable: it travels to workers)."""

    spec: RunSpec
    threads: int = 1  # torch / OpenMP threads inside the run
    num_cpus: float = 1.0  # what the scheduler reserves (Ray)
    num_gpus: float = 0.0
    expected_cost: float = 1.0  # relative, for longest-first order and the ETA
    timeout_s: float | None = None  # the study's run_timeout_s: past it the run is FAILED


@dataclass
class Outcome:
    """A run's result, and what the driver's hook returned for it where it ran (if any).

    `lost` is set when the infrastructure, not the run, kept it from finishing (a process or
    node that kept dying): the run is not done, and `result` is only a placeholder that must
    never be stored.
    """

    task: Task
    result: RunResult
    hook_value: Any = None
    hook_error: str | None = None  # the hook's traceback: the driver does its work instead
    attempts: int = 1
    lost: str | None = None
    submitted_at: float = 0.0  # driver's monotonic clock: handed to the backend
    received_at: float = 0.0  # driver's monotonic clock: back in the driver

    @property
    def overhead_s(self) -> float:
        """Time the backend added around the run (scheduling, process start, transfer)."""
        return max(0.0, self.received_at - self.submitted_at - self.result.wall_time_s)


def set_threads(threads: int) -> None:
    """Pin torch and OpenMP to `threads`: two runs with two threads each on two cores are
    many times slower than with one each (oversubscription)."""
    import torch

    os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


class RunTimedOut(Exception):
    """The run passed its `timeout_s`: raised inside the run, by an alarm of its own process."""


# A run still going this long past its `timeout_s` (in native code, where the alarm cannot reach
# it) is ended from outside its process: the pool kills the process, Ray cancels the task.
KILL_GRACE_S = 5.0


def timed_out_reason(seconds: float) -> str:
    return f"timed out after {seconds:g} s (run_timeout_s)"


def killed_reason(seconds: float) -> str:
    """Why a run whose process was killed at its limit is FAILED (ends as `timed_out_reason`)."""
    return (f"the run did not stop at its limit (native code?); its process was killed {KILL_GRACE_S:g} s later: "
            f"RunTimedOut: {timed_out_reason(seconds)}")


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise `RunTimedOut` in this (main) thread once `seconds` have passed, and again every
    second after that, should the run swallow one; nothing without a limit or off the main thread."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum, frame):
        raise RunTimedOut(timed_out_reason(seconds))

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def execute(task: Task, run: RunFunction, hook: Hook | None = None) -> Outcome:
    """Run one task where it lands (driver, pool process or Ray worker), then the hook.

    The run's errors are a FAILED result (never an exception), so that a deterministic error
    is recorded once and not retried; only a dying process is retried. A run past
    `task.timeout_s` is FAILED too ("timed out after N s"), and its process is free again.
    """
    set_threads(task.threads)
    keep_freed_memory()
    started = time.perf_counter()
    try:
        with time_limit(task.timeout_s):
            result = run(task.spec)
    except RunTimedOut as exc:  # it reached the run's own error handling: the same verdict
        result = RunResult(spec=task.spec, status="FAILED", error=f"RunTimedOut: {exc}",
                           wall_time_s=time.perf_counter() - started)
    outcome = Outcome(task=task, result=result)
    if hook is not None:
        try:
            outcome.hook_value = hook(result)
        except Exception:  # noqa: BLE001 - the driver does the hook's work instead
            outcome.hook_error = traceback.format_exc(limit=3)
    return outcome


class ClusterGone(RuntimeError):
    """The cluster the driver runs on is gone (its head or the driver's own node died): no run
    can be started or collected. Finished runs are in the store; the next `run` does the rest."""


# Resubmissions of a run lost to the infrastructure: the delay before each, in seconds. After
# the last one the run is given up as lost for this command (not FAILED: the next `run` tries it).
RESUBMIT_DELAYS_S = (1.0, 4.0, 16.0)


class Resubmissions:
    """Runs the infrastructure lost, each waiting out its back-off before the next submission.

    The one rule of both process backends: attempt k (1-based) that is lost waits `delays[k-1]`
    seconds; a run lost after `len(delays) + 1` attempts is given up (`add` returns False).
    """

    def __init__(self, delays: Sequence[float]) -> None:
        self.delays = tuple(delays)
        self._heap: list[tuple[float, int, Task, int]] = []  # (due, tie-break, task, next attempt)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, task: Task, attempt: int) -> bool:
        """Schedule the next attempt of `task`, whose attempt `attempt` was lost; False: give up."""
        if attempt > len(self.delays):
            return False
        heapq.heappush(self._heap, (time.monotonic() + self.delays[attempt - 1], id(task), task, attempt + 1))
        return True

    def due(self) -> list[tuple[Task, int]]:
        """(task, attempt) of every run whose back-off is over, earliest first."""
        ready = []
        while self._heap and self._heap[0][0] <= time.monotonic():
            _, _, task, attempt = heapq.heappop(self._heap)
            ready.append((task, attempt))
        return ready

    def seconds_to_next(self) -> float:
        return max(0.0, self._heap[0][0] - time.monotonic()) if self._heap else 0.0


def failed_outcome(task: Task, error: str, attempts: int = 1) -> Outcome:
    """An outcome for a task that reached a worker and failed there outside the run itself
    (its result could not be sent back): recorded FAILED like an error of the run."""
    return Outcome(task=task, result=RunResult(spec=task.spec, status="FAILED", error=error), attempts=attempts)


def lost_outcome(task: Task, reason: str, attempts: int) -> Outcome:
    """An outcome for a task the infrastructure lost `attempts` times: not done, not FAILED."""
    return Outcome(task=task, result=RunResult(spec=task.spec, status="FAILED", error=reason),
                   attempts=attempts, lost=reason)


def stamped(outcome: Outcome, submitted_at: float) -> Outcome:
    outcome.submitted_at, outcome.received_at = submitted_at, time.monotonic()
    return outcome

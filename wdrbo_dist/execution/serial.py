"""The serial backend: each run in the driver process, one after the other (debugging, CI).

A run here shares the driver's signals: Ctrl-C (or the command line's SIGTERM) raised inside it
can be swallowed, or turned by numba into a SystemError that the run records as its own error.
So a run during which a signal handler raised is no result: the interrupt is raised again.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from wdrbo_dist.execution.task import Hook, Outcome, RunFunction, Task, execute, stamped


def map_serial(tasks: Sequence[Task], run: RunFunction, hook: Hook | None = None) -> Iterator[Outcome]:
    import torch

    threads = torch.get_num_threads()
    try:
        for task in tasks:
            submitted = time.monotonic()
            with _interrupts_noted() as raised:
                outcome = execute(task, run, hook)
            if raised:
                raise KeyboardInterrupt
            yield stamped(outcome, submitted)
    finally:
        torch.set_num_threads(threads)  # the driver gets its own setting back


@contextmanager
def _interrupts_noted() -> Iterator[list[int]]:
    """Within the block, each SIGINT or SIGTERM whose Python handler raised is noted in the list."""
    raised: list[int] = []
    wrapped: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler):
                wrapped[signum] = handler
                signal.signal(signum, _noting(handler, raised))
    try:
        yield raised
    finally:
        for signum, handler in wrapped.items():
            signal.signal(signum, handler)


def _noting(handler: Any, raised: list[int]) -> Any:
    def noting(signum: int, frame: FrameType | None) -> None:
        try:
            handler(signum, frame)
        except BaseException:
            raised.append(signum)
            raise

    return noting

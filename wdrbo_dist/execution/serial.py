"""The serial backend: each run in the driver process, one after the other (debugging, CI)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from wdrbo_dist.execution.task import Hook, Outcome, RunFunction, Task, execute, stamped


def map_serial(tasks: Sequence[Task], run: RunFunction, hook: Hook | None = None) -> Iterator[Outcome]:
    import torch

    threads = torch.get_num_threads()
    try:
        for task in tasks:
            submitted = time.monotonic()
            yield stamped(execute(task, run, hook), submitted)
    finally:
        torch.set_num_threads(threads)  # the driver gets its own setting back

"""The serial backend: each run in the driver process, one after the other (debugging, CI)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import time

from wdrbo_dist.backends.task import Outcome, Task, execute, stamped


def map_serial(tasks: Sequence[Task]) -> Iterator[Outcome]:
    import torch

    threads = torch.get_num_threads()
    try:
        for task in tasks:
            submitted = time.monotonic()
            yield stamped(execute(task), submitted)
    finally:
        torch.set_num_threads(threads)  # the driver gets its own setting back

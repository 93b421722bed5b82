"""The serial backend: each run in the driver process, one after the other (debugging, CI)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from wdrbo_dist.backends.task import Outcome, Task, execute


def map_serial(tasks: Sequence[Task]) -> Iterator[Outcome]:
    import torch

    threads = torch.get_num_threads()
    try:
        for task in tasks:
            yield execute(task)
    finally:
        torch.set_num_threads(threads)  # the driver gets its own setting back

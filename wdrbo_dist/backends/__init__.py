"""Backends map the one pure run function over many runs and yield outcomes as they complete.

`serial` runs in the driver, `local` in a process pool, `ray` as Ray tasks (a local Ray or a
cluster). All three call `execute`, so the same spec gives the same records everywhere; only
where the work happens differs. (Submitting a whole driver to a cluster is `wdrbo_dist.submit`.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from wdrbo_dist.backends.task import Outcome, Task, execute

BACKENDS = ("serial", "local", "ray")


def map_tasks(
    tasks: Sequence[Task], backend: str, workers: int = 1, address: str | None = None
) -> Iterator[Outcome]:
    """Run `tasks` (already in the order to start them) and yield outcomes in completion order.

    Closing the iterator (or an exception in the consumer, Ctrl-C included) cancels what is
    still running.
    """
    if backend == "serial":
        from wdrbo_dist.backends.serial import map_serial

        return map_serial(tasks)
    if backend == "local":
        from wdrbo_dist.backends.local import map_local

        return map_local(tasks, workers)
    if backend == "ray":
        from wdrbo_dist.backends.ray_backend import map_ray

        return map_ray(tasks, workers, address)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


__all__ = ["BACKENDS", "Outcome", "Task", "execute", "map_tasks"]

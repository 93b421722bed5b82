"""Backends map the driver's run function over many runs and yield outcomes as they complete.

`serial` runs in the driver, `local` in a process pool, `ray` as Ray tasks (a local Ray or a
cluster). All three call `execute`, so the same spec gives the same records everywhere; only
where the work happens differs. What happens to a result is the driver's: a hook it passes runs
beside each run, and the outcomes come back to it. (Submitting a whole driver to a cluster is
`wdrbo_dist.execution.submit`; the backends' names are in `wdrbo_dist.execution.names`.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from wdrbo_dist.execution.names import BACKENDS
from wdrbo_dist.execution.task import Hook, Outcome, RunFunction, Task, execute


def map_tasks(
    tasks: Sequence[Task], backend: str, workers: int = 1, address: str | None = None, *,
    run: RunFunction, hook: Hook | None = None,
) -> Iterator[Outcome]:
    """Run `tasks` (already in the order to start them) and yield outcomes in completion order.

    Each task runs `run(task.spec)` and then `hook(result)` where it lands (`execute`).
    Closing the iterator (or an exception in the consumer, Ctrl-C included) cancels what is
    still running.
    """
    if backend == "serial":
        from wdrbo_dist.execution.serial import map_serial

        return map_serial(tasks, run, hook)
    if backend == "local":
        from wdrbo_dist.execution.local import map_local

        return map_local(tasks, workers, run, hook)
    if backend == "ray":
        from wdrbo_dist.execution.ray_backend import map_ray

        return map_ray(tasks, workers, run, hook, address)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


__all__ = ["BACKENDS", "Hook", "Outcome", "RunFunction", "Task", "execute", "map_tasks"]

"""The Ray backend: one Ray task per run, on a local Ray or on a cluster.

Each task reserves the algorithm's `num_cpus` / `num_gpus`, pins torch to that many threads,
and is retried by Ray if its worker process dies (`max_retries`); an error raised by the run
itself is captured in its result and never retried (it would fail again). At most `workers`
tasks are in flight, submitted longest-expected first, and results are handled in completion
order, so a slow run never holds back the store or the tracker.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from wdrbo_dist.backends.task import Outcome, Task, execute, failed_outcome, stamped

MAX_RETRIES = 3  # retries of a task whose worker process died


def _prepare_environment() -> None:
    """Settings every Ray process started from here inherits."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Start a local Ray (address None) or join a cluster (`auto`, `HOST:PORT`, `ray://...`).

    Returns True when this call initialised Ray (so the caller should shut it down).
    """
    import ray

    if ray.is_initialized():
        return False
    _prepare_environment()
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # "local": a Ray of our own, never the cluster a `ray start` recorded in Ray's temp
        # folder (a dead one made ray.init fail, a live one would take our runs).
        kwargs.update(address="local", num_cpus=num_cpus, include_dashboard=False)
    elif address is not None:
        kwargs["address"] = address  # else: RAY_ADDRESS names the cluster (e.g. inside a Ray job)
    ray.init(**kwargs)
    return True


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def map_ray(tasks: Sequence[Task], workers: int, address: str | None = None) -> Iterator[Outcome]:
    import ray

    if not tasks:
        return
    per_task = max(t.num_cpus for t in tasks)
    started = connect(address, num_cpus=max(1, math.ceil(workers * per_task)))
    remote = ray.remote(execute)
    queue = deque(tasks)
    pending: dict[Any, tuple[Task, float]] = {}
    try:
        while queue or pending:
            while queue and len(pending) < workers:
                task = queue.popleft()
                ref = remote.options(
                    num_cpus=task.num_cpus,
                    num_gpus=task.num_gpus,
                    max_retries=MAX_RETRIES,
                    retry_exceptions=False,
                    name=f"run {task.spec.label}",
                ).remote(task)
                pending[ref] = (task, time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task, submitted = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except (ray.exceptions.RayError, OSError) as exc:
                    outcome = failed_outcome(task, _describe(exc), attempts=MAX_RETRIES + 1)
                yield stamped(outcome, submitted)
    finally:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - cancelling is best effort on the way out
                pass
        if started:
            ray.shutdown()

"""The Ray backend: one Ray task per run, on a local Ray or on a cluster.

Each task reserves the algorithm's `num_cpus` / `num_gpus` and pins torch to that many threads.
An error raised by the run itself is captured in its result and never retried (it would fail
again). Everything else is the infrastructure's: Ray retries a task whose worker or node died
(`max_retries`), and when Ray gives up (or an object is lost, or a worker ran out of memory)
the driver submits the run again after a back-off (`RESUBMIT_DELAYS_S`), then gives it up as
lost, never FAILED. When the cluster itself is gone (the driver's raylet died, or the head's
GCS stops answering: Ray would end the driver process after 60 s) `ClusterGone` is raised,
before Ray gets that far. At most `workers` tasks are in flight, longest expected first.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import socket
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from wdrbo_dist.backends.task import (
    RESUBMIT_DELAYS_S, ClusterGone, Hook, Outcome, Resubmissions, RunFunction, Task, execute, lost_outcome, stamped,
)

MAX_RETRIES = 3  # Ray's own retries of a task whose worker process or node died
GCS_SILENCE_S = 15.0  # the head's GCS refusing connections this long means the cluster is gone
POLL_S = 1.0  # how often the driver looks up from ray.wait to check the cluster


class ClusterUnreachable(RuntimeError):
    """`--address` names no Ray cluster that answers (checked before any work)."""


def _prepare_environment() -> None:
    """Settings every Ray process started from here inherits."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _host_port(address: str) -> tuple[str, int] | None:
    """HOST and PORT of `HOST:PORT` or `ray://HOST:PORT`; None for `auto` and the like."""
    text = address.removeprefix("ray://")
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _answers(host: str, port: int, timeout_s: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """Raise `ClusterUnreachable` (one line) when a HOST:PORT address does not answer."""
    if address is None:
        return
    target = _host_port(address)
    if target is not None and not _answers(*target, timeout_s=timeout_s):
        raise ClusterUnreachable(
            f"--address {address}: nothing answers at {target[0]}:{target[1]}; "
            "give the head's GCS address (`ray start --head` prints it) or leave --address out "
            "to start a Ray of this machine's own"
        )


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
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        raise ClusterUnreachable(f"--address {address or os.environ.get('RAY_ADDRESS')}: {_describe(exc)}") from None
    return True


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _GcsWatch:
    """Tells when the head's GCS has refused connections for `GCS_SILENCE_S` in a row."""

    def __init__(self) -> None:
        import ray

        address = getattr(ray.get_runtime_context(), "gcs_address", None)
        self.target = _host_port(address) if address else None
        self.silent_since: float | None = None

    def gone(self) -> bool:
        if self.target is None:
            return False
        if _answers(*self.target, timeout_s=1.0):
            self.silent_since = None
            return False
        now = time.monotonic()
        self.silent_since = self.silent_since or now
        return now - self.silent_since >= GCS_SILENCE_S


_abandoned = False


def _abandon_ray() -> None:
    """The cluster is gone: Ray's own shutdown would wait on the dead GCS, so drop it."""
    global _abandoned
    import ray

    atexit.unregister(ray.shutdown)
    _abandoned = True


def exit_if_abandoned(code: int) -> None:
    """End the process now with `code` if this process gave its Ray up for gone.

    Ray's core worker, its GCS gone, crashes at interpreter exit (SIGSEGV here, Ray 2.60),
    which would replace the exit code the user's script or job wrapper reads.
    """
    if _abandoned:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def map_ray(
    tasks: Sequence[Task], workers: int, run: RunFunction, hook: Hook | None = None, address: str | None = None
) -> Iterator[Outcome]:
    import ray

    if not tasks:
        return
    per_task = max(t.num_cpus for t in tasks)
    started = connect(address, num_cpus=max(1, math.ceil(workers * per_task)))
    remote = ray.remote(execute)
    queue: deque[tuple[Task, int]] = deque((task, 1) for task in tasks)
    waiting = Resubmissions(RESUBMIT_DELAYS_S)
    pending: dict[Any, tuple[Task, int, float]] = {}
    watch = _GcsWatch()
    gone = False
    try:
        while queue or pending or waiting:
            queue.extendleft(reversed(waiting.due()))
            while queue and len(pending) < workers:
                task, attempt = queue.popleft()
                ref = remote.options(
                    num_cpus=task.num_cpus,
                    num_gpus=task.num_gpus,
                    max_retries=MAX_RETRIES,
                    retry_exceptions=False,
                    name=f"run {task.spec.label}",
                ).remote(task, run, hook)
                pending[ref] = (task, attempt, time.monotonic())
            if not pending:
                time.sleep(min(POLL_S, waiting.seconds_to_next()))
                continue
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            if not ready and watch.gone():
                gone = True
                raise ClusterGone(f"the Ray cluster's head ({':'.join(map(str, watch.target))}) "
                                  f"stopped answering for {GCS_SILENCE_S:.0f} s")
            for ref in ready:
                task, attempt, submitted = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.LocalRayletDiedError as exc:
                    gone = True
                    raise ClusterGone(f"this machine's Ray node died ({_describe(exc)[:120]})") from None
                except (ray.exceptions.RayError, OSError) as exc:
                    # Not the run's error (execute captures those): a process, node or object
                    # the infrastructure lost. Submit again after a back-off, or give it up.
                    if not waiting.add(task, attempt):
                        yield stamped(lost_outcome(task, _describe(exc), attempt), submitted)
                    continue
                outcome.attempts = attempt
                yield stamped(outcome, submitted)
    finally:
        if gone:
            _abandon_ray()
        else:
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - cancelling is best effort on the way out
                    pass
            if started:
                ray.shutdown()

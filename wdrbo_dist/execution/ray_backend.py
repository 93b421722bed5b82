"""The Ray backend: one Ray task per run, on a local Ray or on a cluster.

Each task reserves the algorithm's `num_cpus` / `num_gpus` (checked against the nodes before any
run) and pins torch to that many threads. The run's own error, a task that cannot be set up
(runtime environment, import) and a run killed for memory twice are FAILED with their reason.
Everything else is the infrastructure's: Ray retries a task whose worker or node died, then the
driver submits it again after a back-off (`RESUBMIT_DELAYS_S`) and then gives it up as lost,
never FAILED, and a run still going `KILL_GRACE_S` past its `timeout_s` (native code) is
cancelled with force (its worker killed) and FAILED. A cluster that is gone raises `ClusterGone`
before Ray would end the driver. The runner's own Ray listens on 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from wdrbo_dist.errors import one_line
from wdrbo_dist.execution.ray_limits import Starts, cancel_overdue, execute_noted
from wdrbo_dist.execution.reaper import reaping, stop
from wdrbo_dist.execution.task import (
    RESUBMIT_DELAYS_S, ClusterGone, Hook, Outcome, Resubmissions, RunFunction, Task, failed_outcome, killed_reason,
    lost_outcome, stamped,
)

MAX_RETRIES = 3  # Ray's own retries of a task whose worker process or node died
GCS_SILENCE_S = 15.0  # the head's GCS refusing connections this long means the cluster is gone
POLL_S = 1.0  # how often the driver looks up from ray.wait to check the cluster
MEMORY_KILLS = 2  # a run killed for memory this often is FAILED: it would be killed again
LOCAL_HOST = "127.0.0.1"  # where the runner's own Ray listens


class ClusterUnreachable(RuntimeError):
    """`--address` names no Ray cluster that answers (checked before any work)."""


def _prepare_environment() -> None:
    """Settings every Ray process started from here inherits."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # A task Ray's memory monitor killed comes back to the driver at once (Ray would retry it
    # within max_retries), which counts memory kills per run (`MEMORY_KILLS`).
    os.environ.setdefault("RAY_task_oom_retries", "0")


def _host_port(address: str) -> tuple[str, int] | None:
    """HOST and PORT of `HOST:PORT` or `ray://HOST:PORT`; None for `auto` and the like."""
    text = address.removeprefix("ray://")
    if "://" in text:  # another scheme (a dashboard's http://): Ray judges it
        return None
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


def cluster_address(address: str | None) -> tuple[str, str] | None:
    """(what named it, HOST:PORT or ray://...) of the cluster `address` or RAY_ADDRESS names;
    None for a Ray of the runner's own. `auto` reads what `ray start` recorded on this machine."""
    env = os.environ.get("RAY_ADDRESS") or None
    if address in (None, "auto") and env:
        return f"RAY_ADDRESS={env}", env
    if address is None:
        return None
    if address != "auto":
        return f"--address {address}", address
    from ray._private.services import find_bootstrap_address

    recorded = find_bootstrap_address(None)
    if not recorded:
        raise ClusterUnreachable("--address auto: no Ray cluster was started on this machine (`ray start` "
                                 "records one); give the head's HOST:PORT or leave --address out")
    return "--address auto", recorded


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """Raise `ClusterUnreachable` (one line) when the cluster that `address`, `auto` or
    RAY_ADDRESS names does not answer within `timeout_s`; writes nothing."""
    named = cluster_address(address)
    target = _host_port(named[1]) if named else None
    if target is not None and not _answers(*target, timeout_s=timeout_s):
        raise ClusterUnreachable(
            f"{named[0]}: nothing answers at {target[0]}:{target[1]} within {timeout_s:g} s; "
            "give the head's GCS address (`ray start --head` prints it) or leave --address out "
            "to start a Ray of this machine's own"
        )


class ResourcesUnfit(ClusterUnreachable):
    """A run asks for more than any node of the cluster has: it would wait forever."""


def _local_cpus(tasks: Sequence[Task], workers: int) -> int:
    return max(1, math.ceil(workers * max(t.num_cpus for t in tasks)))


def check_resources(tasks: Sequence[Task], workers: int, address: str | None = None) -> None:
    """Connect (the Ray stays up for `map_ray`) and raise `ResourcesUnfit` (one line naming the
    algorithm and the resource) unless every task fits some node that is alive now."""
    import ray

    if not tasks:
        return
    connect(address, num_cpus=_local_cpus(tasks, workers))
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    cpus, gpus = (max((n.get(k, 0.0) for n in nodes), default=0.0) for k in ("CPU", "GPU"))
    for task in {(t.spec.algorithm_label, t.num_cpus, t.num_gpus): t for t in tasks}.values():
        if any(n.get("CPU", 0.0) >= task.num_cpus and n.get("GPU", 0.0) >= task.num_gpus for n in nodes):
            continue
        what = (f"resources.num_cpus {task.num_cpus:g} (the largest node has {cpus:g})" if task.num_cpus > cpus else
                f"resources.num_gpus {task.num_gpus:g} (the largest node has {gpus:g})" if task.num_gpus > gpus else
                f"resources num_cpus {task.num_cpus:g} with num_gpus {task.num_gpus:g} together")
        raise ResourcesUnfit(f"algorithm {task.spec.algorithm_label}: {what} fits no node of the Ray cluster, "
                             "so its runs would wait forever; lower it in the study file or add such a node")


def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Start a local Ray (address None) or join a cluster (`auto`, `HOST:PORT`, `ray://...`).

    Returns True when this call initialised Ray (so the caller should shut it down).
    """
    global _owned, _local
    import ray

    if ray.is_initialized():
        return False
    _prepare_environment()
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # "local": a Ray of our own, never the cluster a `ray start` recorded in Ray's temp
        # folder (a dead one made ray.init fail, a live one would take our runs).
        kwargs.update(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address=LOCAL_HOST)
    elif address is not None:
        kwargs["address"] = address  # else: RAY_ADDRESS names the cluster (e.g. inside a Ray job)
    local = kwargs.get("address") == "local"
    try:
        with _loopback_only(local), _sigterm_kept(), reaping(_reapers) if local else nullcontext():
            ray.init(**kwargs)
    except ConnectionError as exc:
        raise ClusterUnreachable(f"--address {address or os.environ.get('RAY_ADDRESS')}: {one_line(exc, named=True)}") from None
    _owned, _local = True, local
    return True


_owned = False  # `connect` started or joined the Ray of this process: `map_ray` shuts it down
_local = False  # that Ray is this process's own (address "local")
_reapers: list[subprocess.Popen] = []  # of the Ray `connect` started (`reaper`)


@contextmanager
def _sigterm_kept() -> Iterator[None]:
    """`ray.init` makes SIGTERM `sys.exit(15)` in the driver: a handler the caller had installed
    (the command line's, which ends the study as Ctrl-C does) is put back."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    except SystemExit as exc:  # SIGTERM while Ray started: Ray's handler took it
        if callable(before) and exc.code == signal.SIGTERM:
            before(signal.SIGTERM, None)  # as the caller's handler takes it (it may raise)
        raise
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)


@contextmanager
def _loopback_only(local: bool) -> Iterator[None]:
    """A Ray of our own takes 127.0.0.1 as its node's address, so that its GCS, raylet, object
    store and workers listen there only. On Linux Ray 2.60 resolves 127.0.0.1 to the machine's
    address, and its servers then listen on every interface; the switch it keeps for macOS and
    Windows (single-machine Ray) keeps the loopback. Checked by tests/execution/test_backends.py."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = saved and not local
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _setup_error(exc: BaseException) -> str:
    """The last line of a task's set-up error that says what went wrong (a RayTaskError holds
    the worker's traceback)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    cause = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1] if lines else "")
    return f"{type(exc).__name__}: {one_line(cause)}"


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
    global _owned, _local
    connect(address, num_cpus=_local_cpus(tasks, workers))
    remote = ray.remote(execute_noted)
    starts = Starts() if any(task.timeout_s for task in tasks) else None
    cancelled: dict[Any, float] = {}  # the tasks cancelled past their limit: their limit
    memory_kills: dict[str, int] = {}
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
            if starts is not None:
                cancel_overdue(pending, starts, cancelled)
            for ref in ready:
                task, attempt, submitted = pending.pop(ref)
                if starts is not None and task.timeout_s:
                    starts.forget(task.spec.run_key)
                if ref in cancelled:
                    limit = cancelled.pop(ref)
                    try:
                        outcome = ray.get(ref)  # it finished as it was cancelled
                    except Exception:  # noqa: BLE001 - killed, as asked
                        outcome = failed_outcome(task, killed_reason(limit), attempt)
                    outcome.attempts = attempt
                    yield stamped(outcome, submitted)
                    continue
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.LocalRayletDiedError as exc:
                    gone = True
                    raise ClusterGone(f"this machine's Ray node died ({one_line(exc, 120, named=True)})") from None
                except ray.exceptions.OutOfMemoryError as exc:
                    kills = memory_kills[task.spec.run_key] = memory_kills.get(task.spec.run_key, 0) + 1
                    if kills >= MEMORY_KILLS:
                        reason = f"out of memory: Ray killed this run's worker for memory {kills} times"
                        yield stamped(failed_outcome(task, f"{reason} ({one_line(exc, named=True)})", attempt), submitted)
                    elif not waiting.add(task, attempt):
                        yield stamped(lost_outcome(task, one_line(exc, named=True), attempt), submitted)
                    continue
                except (ray.exceptions.RuntimeEnvSetupError, ray.exceptions.RayTaskError) as exc:
                    # The task reached a worker and could not start there (its runtime
                    # environment, an import): it would fail again, so it is FAILED with why.
                    why = f"the task could not be set up on its Ray worker: {_setup_error(exc)}"
                    yield stamped(failed_outcome(task, why, attempt), submitted)
                    continue
                except (ray.exceptions.RayError, OSError) as exc:
                    # Not the run's error (execute captures those): a process, node or object
                    # the infrastructure lost. Submit again after a back-off, or give it up.
                    if not waiting.add(task, attempt):
                        yield stamped(lost_outcome(task, one_line(exc, named=True), attempt), submitted)
                    continue
                outcome.attempts = attempt
                yield stamped(outcome, submitted)
    finally:
        if gone:
            _abandon_ray()
        else:
            if starts is not None:
                starts.forget()
            # A Ray this process started or joined ends its job's tasks when the driver leaves it
            # (Ray kills the workers of a finished job); cancelling a task as it completes can
            # end the driver in a check of Ray's ("Tried to complete task that was not pending"),
            # so only tasks of a Ray someone else connected (it stays) are cancelled.
            for ref in pending if not _owned else ():
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - cancelling is best effort on the way out
                    pass
            if _owned:
                ray.shutdown()
                _owned = _local = False
                stop(_reapers)

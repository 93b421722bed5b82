"""Run limits on Ray: a run with a `timeout_s` notes its start in the GCS where it lands, and the
driver cancels (with force: its worker is killed) a run still going `KILL_GRACE_S` past it, stuck
in native code where its own alarm cannot reach it. The driver times it from the note, not from
the submission: on a cluster a task may wait long for a node.
"""

from __future__ import annotations

import time
from typing import Any

from wdrbo_dist.execution.task import KILL_GRACE_S, Hook, Outcome, RunFunction, Task, execute

STARTS = "wdrbo-run-starts"  # the GCS key-value namespace of the notes
LOOK_EVERY_S = 1.0


def execute_noted(task: Task, run: RunFunction, hook: Hook | None) -> Outcome:
    """`execute` on a Ray worker; a run with a limit first notes its start, as `JOB:RUN_KEY:WORKER`."""
    if task.timeout_s:
        import ray
        from ray.experimental.internal_kv import _internal_kv_put

        context = ray.get_runtime_context()
        _internal_kv_put(f"{context.get_job_id()}:{task.spec.run_key}:{context.get_worker_id()}", b"",
                         namespace=STARTS)
    return execute(task, run, hook)


class Starts:
    """When each run with a limit started on its worker, by the driver's clock (when the driver
    first saw its note: the nodes' clocks may differ); a retry on another worker starts anew."""

    def __init__(self) -> None:
        import ray

        self.prefix = f"{ray.get_runtime_context().get_job_id()}:"
        self.workers: dict[str, set[str]] = {}  # run key: the workers it started on
        self.since: dict[str, float] = {}  # run key: when its latest start was seen
        self.looked = 0.0

    def look(self) -> None:
        """Read the notes (once a second at most: the driver loops once per outcome)."""
        from ray.experimental.internal_kv import _internal_kv_list

        now = time.monotonic()
        if now - self.looked < LOOK_EVERY_S:
            return
        self.looked = now
        for note in _internal_kv_list(self.prefix, namespace=STARTS):
            key, _, worker = note.decode().removeprefix(self.prefix).rpartition(":")
            if worker not in self.workers.setdefault(key, set()):
                self.workers[key].add(worker)
                self.since[key] = now

    def forget(self, key: str | None = None) -> None:
        """Drop one run's notes (all of this driver's without `key`)."""
        from ray.experimental.internal_kv import _internal_kv_del

        try:
            _internal_kv_del(self.prefix + (f"{key}:" if key else ""), del_by_prefix=True, namespace=STARTS)
        except Exception:  # noqa: BLE001 - a cluster that is gone keeps them; they are a few bytes
            pass
        for notes in (self.workers, self.since):
            if key:
                notes.pop(key, None)
            else:
                notes.clear()


def cancel_overdue(pending: dict[Any, tuple[Task, int, float]], starts: Starts, cancelled: dict[Any, float]) -> None:
    """Cancel (force: the worker is killed, Ray starts another) each task whose run has gone on
    `KILL_GRACE_S` past its limit: stuck in native code, where its own alarm cannot reach it."""
    import ray

    starts.look()
    now = time.monotonic()
    for ref, (task, _, _) in pending.items():
        since = starts.since.get(task.spec.run_key)
        if task.timeout_s and ref not in cancelled and since is not None and now - since > task.timeout_s + KILL_GRACE_S:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - it finished meanwhile; its outcome says so
                continue
            cancelled[ref] = task.timeout_s

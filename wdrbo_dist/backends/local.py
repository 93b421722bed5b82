"""The local backend: a pool of `workers` processes on this machine.

Processes are spawned (not forked): forking a driver that already holds torch's thread pools
is unsafe. Pool processes ignore SIGINT, so Ctrl-C reaches only the driver, which cancels the
queue and terminates the pool. A pool process that dies (killed, out of memory) breaks the
pool: the pool is rebuilt and the runs that were in flight are submitted again after a
back-off (`RESUBMIT_DELAYS_S`); a run whose process keeps dying is given up as lost for this
command, not FAILED, as on Ray.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from wdrbo_dist.backends.task import (
    RESUBMIT_DELAYS_S, Hook, Outcome, Resubmissions, RunFunction, Task, execute, failed_outcome, lost_outcome,
    stamped,
)
from wdrbo_dist.threads import THREAD_VARIABLES


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    )


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the pool now: cancel queued runs and end the processes this pool started."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


@contextmanager
def _thread_environment(threads: int) -> Iterator[None]:
    """Pool processes import torch and NumPy before `set_threads` runs, and their OpenMP and
    BLAS pools take their size from these variables at that import (2 threads here otherwise,
    checked with threadpoolctl). Ray sets them for its workers; the pool's processes get them
    the same way, from the environment they are spawned with.
    """
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def map_local(tasks: Sequence[Task], workers: int, run: RunFunction, hook: Hook | None = None) -> Iterator[Outcome]:
    threads = max((task.threads for task in tasks), default=1)
    with _thread_environment(threads):
        yield from _map_local(tasks, workers, run, hook)


def _map_local(tasks: Sequence[Task], workers: int, run: RunFunction, hook: Hook | None) -> Iterator[Outcome]:
    queue: deque[tuple[Task, int]] = deque((task, 1) for task in tasks)
    waiting = Resubmissions(RESUBMIT_DELAYS_S)
    pool = _new_pool(workers)
    running: dict[Future, tuple[Task, int, float]] = {}
    completed = False
    try:
        while queue or running or waiting:
            queue.extendleft(reversed(waiting.due()))
            while queue and len(running) < workers:
                task, attempt = queue.popleft()
                running[pool.submit(execute, task, run, hook)] = (task, attempt, time.monotonic())
            if not running:
                time.sleep(waiting.seconds_to_next())
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            broken: list[tuple[Task, int, float]] = []
            for future in done:
                task, attempt, submitted = running.pop(future)
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    broken.append((task, attempt, submitted))
                    continue
                except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
                    yield stamped(failed_outcome(task, f"{type(exc).__name__}: {exc}", attempt), submitted)
                    continue
                outcome.attempts = attempt
                yield stamped(outcome, submitted)
            if broken:
                # Every run in flight is lost with a broken pool: submit them again in a new one.
                broken += list(running.values())
                running.clear()
                _terminate(pool)
                pool = _new_pool(workers)
                for task, attempt, submitted in broken:
                    if not waiting.add(task, attempt):
                        reason = f"its worker process died {attempt} times (killed or out of memory)"
                        yield stamped(lost_outcome(task, reason, attempt), submitted)
        completed = True
    finally:
        if completed:
            pool.shutdown(wait=True)
        else:
            _terminate(pool)

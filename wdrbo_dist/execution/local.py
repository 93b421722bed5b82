"""The local backend: a pool of `workers` processes on this machine.

Processes are spawned (not forked): forking a driver that already holds torch's thread pools
is unsafe. Pool processes ignore SIGINT, so Ctrl-C reaches only the driver, which cancels the
queue and terminates the pool. A pool process that dies (killed) breaks the pool: the pool is
rebuilt and the runs in flight are submitted again after a back-off (`RESUBMIT_DELAYS_S`), then
given up as lost, as on Ray (a task handed to the pool that no process had taken yet goes back
to the queue as it was). As on Ray, a task that cannot be set up in its process (an import)
and a run whose process the kernel killed for memory twice are FAILED with their reason.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import tempfile
import traceback
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from queue import Empty, SimpleQueue
from typing import Any

from wdrbo_dist.execution.task import (
    RESUBMIT_DELAYS_S, Hook, Outcome, Resubmissions, RunFunction, Task, execute, failed_outcome, lost_outcome,
    stamped,
)

MEMORY_KILLS = 2  # a run whose process the kernel killed for memory this often is FAILED
# Tasks handed to the pool per process. They wait in the pool (the driver's memory: the pool's
# own thread hands each to the next free process), so a process never idles on the driver: not
# while it stores a result, nor while it compacts the store or writes an MLflow batch (half a
# second at 10^5 short runs, which two tasks a process left the processes idle for).
TASKS_PER_WORKER = 256


def _execute_here(payload: bytes, marks: str, run_key: str) -> Outcome | str:
    """`execute` in a pool process, with (task, run, hook) unpickled here, so that an import
    that fails is this task's error (a string), not a broken pool. Leaves its run key under
    `marks`, named by this process's id, first: should the process die, the driver knows which
    of the tasks it handed the pool had started."""
    with open(os.path.join(marks, str(os.getpid())), "w") as mark:
        mark.write(run_key)
    try:
        task, run, hook = pickle.loads(payload)
    except Exception:  # noqa: BLE001 - a module missing here, a class that moved
        return traceback.format_exc(limit=2).strip().splitlines()[-1]
    return execute(task, run, hook)


def _started(marks: str, keys: Sequence[str]) -> set[str]:
    """Which of `keys` a pool process started: those its mark names (a process's mark holds
    the task it took last, so a task handed to the pool but not yet taken is in none)."""
    named = set()
    for name in os.listdir(marks):
        try:
            with open(os.path.join(marks, name)) as mark:
                named.add(mark.read())
        except OSError:
            pass
    return named & set(keys)


def _memory_kills_so_far() -> int:
    """The kernel's count of processes it killed for memory (/proc/vmstat), 0 where unknown."""
    try:
        with open("/proc/vmstat") as stats:
            return next((int(line.split()[1]) for line in stats if line.startswith("oom_kill ")), 0)
    except OSError:
        return 0


def _killed_for_memory(pool: ProcessPoolExecutor, marks: str, oom_before: int, in_flight: list[str]) -> list[str]:
    """Run keys whose pool process the kernel killed for memory, when its OOM count rose: those
    whose process died of SIGKILL, or every run in flight where the broken pool no longer shows
    its processes (the executor may have joined and dropped them already)."""
    if _memory_kills_so_far() <= oom_before:
        return []
    keys = []
    for pid, process in dict(getattr(pool, "_processes", None) or {}).items():
        if process.exitcode == -signal.SIGKILL:
            try:
                with open(os.path.join(marks, str(pid))) as mark:
                    keys.append(mark.read())
            except OSError:
                pass
    return keys or in_flight


from wdrbo_dist.execution.threads import THREAD_VARIABLES


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
    with tempfile.TemporaryDirectory(prefix="wdrbo-pool-") as marks:
        yield from _map_pool(tasks, workers, run, hook, marks)


def _finished_now(finished: SimpleQueue[Future], running: dict[Future, Any]) -> list[Future]:
    """The futures of `running` that have finished: at least one (waits for it), in order.
    A future of a pool given up (broken) may still report: it is no longer running."""
    while True:
        reported = [finished.get()]
        while True:
            try:
                reported.append(finished.get_nowait())
            except Empty:
                break
        done = [f for f in reported if f in running]
        if done:
            return done


def _map_pool(tasks: Sequence[Task], workers: int, run: RunFunction, hook: Hook | None,
              marks: str) -> Iterator[Outcome]:
    queue: deque[tuple[Task, int]] = deque((task, 1) for task in tasks)
    waiting = Resubmissions(RESUBMIT_DELAYS_S)
    pool = _new_pool(workers)
    running: dict[Future, tuple[Task, int, float]] = {}
    finished: SimpleQueue[Future] = SimpleQueue()  # futures as they finish
    memory_kills: dict[str, int] = {}
    oom_before = _memory_kills_so_far()
    completed = False
    try:
        while queue or running or waiting:
            queue.extendleft(reversed(waiting.due()))
            while queue and len(running) < workers * TASKS_PER_WORKER:
                task, attempt = queue.popleft()
                payload = pickle.dumps((task, run, hook))
                future = pool.submit(_execute_here, payload, marks, task.spec.run_key)
                running[future] = (task, attempt, time.monotonic())
                future.add_done_callback(finished.put)  # `wait` would go over all that run, each time
            if not running:
                time.sleep(waiting.seconds_to_next())
                continue
            done = _finished_now(finished, running)
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
                if isinstance(outcome, str):
                    why = f"the task could not be set up in its pool process: {outcome}"
                    yield stamped(failed_outcome(task, why, attempt), submitted)
                    continue
                outcome.attempts = attempt
                yield stamped(outcome, submitted)
            if broken:
                # Every run in flight is lost with a broken pool: submit them again in a new one.
                # When some had started, those not yet taken go back to the queue as they were
                # (nothing happened to them); when none had, the pool itself failed: all count.
                broken += list(running.values())
                running.clear()
                started = _started(marks, [t.spec.run_key for t, _, _ in broken])
                if started:
                    queue.extendleft(reversed([(t, a) for t, a, _ in broken if t.spec.run_key not in started]))
                    broken = [b for b in broken if b[0].spec.run_key in started]
                for key in _killed_for_memory(pool, marks, oom_before, [t.spec.run_key for t, _, _ in broken]):
                    memory_kills[key] = memory_kills.get(key, 0) + 1
                oom_before = _memory_kills_so_far()
                _terminate(pool)
                pool = _new_pool(workers)
                for task, attempt, submitted in broken:
                    kills = memory_kills.get(task.spec.run_key, 0)
                    if kills >= MEMORY_KILLS:
                        why = f"out of memory: the kernel killed this run's process for memory {kills} times"
                        yield stamped(failed_outcome(task, why, attempt), submitted)
                    elif not waiting.add(task, attempt):
                        reason = f"its worker process died {attempt} times (killed or out of memory)"
                        yield stamped(lost_outcome(task, reason, attempt), submitted)
        completed = True
    finally:
        if completed:
            pool.shutdown(wait=True)
        else:
            _terminate(pool)

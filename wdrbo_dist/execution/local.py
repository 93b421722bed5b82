"""The local backend: a pool of `workers` spawned processes (forking a driver that holds torch's
thread pools is unsafe) that ignore SIGINT and die with their driver, whatever ends it.

A pool process that dies breaks the pool: it is rebuilt, and the runs in flight are submitted
again after a back-off (`RESUBMIT_DELAYS_S`), then given up as lost (a task no process had taken
goes back to the queue as it was). As on Ray, a task that cannot be set up (an import) and a run
killed for memory twice are FAILED; so is a run still going `KILL_GRACE_S` past its `timeout_s`
(native code), whose process the driver kills (the other runs in flight start again, same
attempt). The marks folder is named by the driver's pid; the next pool removes a dead driver's.
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import traceback
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import SpawnContext
from queue import Empty, SimpleQueue
from typing import Any

from wdrbo_dist.execution.task import (
    KILL_GRACE_S, RESUBMIT_DELAYS_S, Hook, Outcome, Resubmissions, RunFunction, Task, execute, failed_outcome,
    killed_reason, lost_outcome, stamped,
)

MEMORY_KILLS = 2  # a run whose process the kernel killed for memory this often is FAILED
# Tasks handed to the pool per process. They wait in the pool (the driver's memory: the pool's
# own thread hands each to the next free process), so a process never idles on the driver: not
# while it stores a result, nor while it compacts the store or writes an MLflow batch (half a
# second at 10^5 short runs, which two tasks a process left the processes idle for).
TASKS_PER_WORKER = 256
POLL_S = 0.5  # how often the driver looks for a run past its limit, while one with a limit is in flight
POOL_FOLDER = "wdrbo-pool-"  # + the driver's pid and start time: whose marks these are
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _execute_here(payload: bytes, marks: str, run_key: str) -> Outcome | str:
    """`execute` in a pool process, with (task, run, hook) unpickled here, so that an import
    that fails is this task's error (a string), not a broken pool. Leaves its run key under
    `marks`, named by this process's id, first: should the process die, the driver knows which
    of the tasks it handed the pool had started."""
    path = os.path.join(marks, str(os.getpid()))
    with open(path, "w") as mark:
        mark.write(run_key)
    try:
        task, run, hook = pickle.loads(payload)
    except Exception:  # noqa: BLE001 - a module missing here, a class that moved
        return traceback.format_exc(limit=2).strip().splitlines()[-1]
    if task.timeout_s:
        os.utime(path)  # its run starts now, its imports done: the driver times its limit from here
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


def _init_worker(driver: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(driver)


def _die_with(driver: int) -> None:
    """End this pool process when its driver (its parent) dies, SIGKILL included: else it stays,
    a child of pid 1, holding its memory and the driver's output pipe. On Linux the kernel sends
    SIGKILL (PR_SET_PDEATHSIG; it fires when the driver's thread that started the pool ends),
    and a driver that died before it was set is seen at once; elsewhere a thread watches."""
    if sys.platform.startswith("linux"):
        try:
            set_death_signal = ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            set_death_signal = False
        if set_death_signal:
            if os.getppid() != driver:
                os._exit(1)
            return
    threading.Thread(target=_watch_parent, args=(driver,), name="wdrbo-watch-driver", daemon=True).start()


def _watch_parent(driver: int) -> None:
    while os.getppid() == driver:
        time.sleep(1.0)
    os._exit(1)


def _process_start(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, /proc), "0" where unknown: a pid reused
    by another process has another start."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
        return text[text.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return "0"


def _owner_gone(name: str) -> bool:
    """Whether the driver that `wdrbo-pool-PID-START-xxxx` names has ended (pid gone or reused)."""
    pid, _, rest = name.removeprefix(POOL_FOLDER).partition("-")
    start = rest.partition("-")[0]
    if not pid.isdigit() or not start.isdigit():
        return False  # not named by its driver
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, another user's
    return start != "0" and _process_start(int(pid)) not in ("0", start)


def _remove_orphaned_folders() -> None:
    """Remove the marks folders of drivers that ended without removing theirs (SIGKILL)."""
    root = tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(root) if name.startswith(POOL_FOLDER)]
    except OSError:
        return
    for name in names:
        if _owner_gone(name):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


class _NamedSpawn(SpawnContext):
    """The spawn context, its processes named after their pool (`_terminate` finds them all)."""

    def __init__(self) -> None:
        super().__init__()
        self.tag = f"{POOL_FOLDER}{next(_pools)}"

    def Process(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - the context's own name
        process = super().Process(*args, **kwargs)
        process.name = self.tag
        return process


_pools = itertools.count()


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=_NamedSpawn(), initializer=_init_worker,
                               initargs=(os.getpid(),))


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the pool now: cancel queued runs and end the processes this pool started (killed
    when SIGTERM does not end one within seconds: one that blocks it in native code). A process
    whose start an interrupt cut short is not yet among the pool's, and the driver would wait
    for it at exit: it is found by its name (`_NamedSpawn`)."""
    tag = getattr(getattr(pool, "_mp_context", None), "tag", None)
    processes = list(getattr(pool, "_processes", {}).values())
    processes += [p for p in multiprocessing.active_children() if tag and p.name == tag and p not in processes]
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=2)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


def _overdue(marks: str, limits: dict[str, float], pool: ProcessPoolExecutor) -> dict[int, str]:
    """Pool processes (pid: run key) whose run, among `limits` (run key: its limit in seconds),
    has gone on `KILL_GRACE_S` past its limit. A mark's time is when its run started (`_execute_here`)."""
    processes = dict(getattr(pool, "_processes", None) or {})
    now, found = time.time(), {}
    for name in os.listdir(marks):
        path = os.path.join(marks, name)
        try:
            with open(path) as mark:
                key = mark.read()
            since = os.stat(path).st_mtime  # after the read: a newer run's mark only delays it
        except OSError:
            continue
        if key in limits and name.isdigit() and int(name) in processes and now - since > limits[key] + KILL_GRACE_S:
            found[int(name)] = key
    return found


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
    _remove_orphaned_folders()
    me = os.getpid()
    with tempfile.TemporaryDirectory(prefix=f"{POOL_FOLDER}{me}-{_process_start(me)}-") as marks:
        yield from _map_pool(tasks, workers, run, hook, marks)


def _finished_now(finished: SimpleQueue[Future], running: dict[Future, Any],
                  timeout: float | None = None) -> list[Future]:
    """The futures of `running` that have finished, in order: at least one (waits for it), or
    none after `timeout` seconds. A future of a pool given up (broken) may still report: it is
    no longer running."""
    while True:
        try:
            reported = [finished.get(timeout=timeout)]
        except Empty:
            return []
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
    limited = any(task.timeout_s for task in tasks)
    timed_out: dict[str, float] = {}  # run key: its limit, of the runs whose process the driver killed
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
            done = _finished_now(finished, running, POLL_S if limited else None)
            if limited:
                limits = {t.spec.run_key: t.timeout_s for f, (t, _, _) in running.items()
                          if t.timeout_s and t.spec.run_key not in timed_out and not f.done()}
                for pid, key in _overdue(marks, limits, pool).items():
                    try:
                        os.kill(pid, signal.SIGKILL)  # a process of this pool: the pool breaks
                    except ProcessLookupError:
                        continue
                    timed_out[key] = limits[key]
            broken: list[tuple[Task, int, float]] = []
            for future in done:
                task, attempt, submitted = running.pop(future)
                if isinstance(future.exception(), BrokenProcessPool):
                    broken.append((task, attempt, submitted))
                    continue
                timed_out.pop(task.spec.run_key, None)  # it came back all the same
                try:
                    outcome = future.result()
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
                # When the driver broke it (a run past its limit), that run is FAILED and every
                # other goes back to the queue as it was.
                broken += list(running.values())
                running.clear()
                killed = [(t, a, s, timed_out[t.spec.run_key]) for t, a, s in broken if t.spec.run_key in timed_out]
                if timed_out:
                    queue.extendleft(reversed([(t, a) for t, a, _ in broken if t.spec.run_key not in timed_out]))
                    timed_out.clear()
                    broken = []
                started = _started(marks, [t.spec.run_key for t, _, _ in broken])
                if started:
                    queue.extendleft(reversed([(t, a) for t, a, _ in broken if t.spec.run_key not in started]))
                    broken = [b for b in broken if b[0].spec.run_key in started]
                for key in _killed_for_memory(pool, marks, oom_before, [t.spec.run_key for t, _, _ in broken]):
                    memory_kills[key] = memory_kills.get(key, 0) + 1
                oom_before = _memory_kills_so_far()
                _terminate(pool)
                pool = _new_pool(workers)
                for task, attempt, submitted, limit in killed:
                    yield stamped(failed_outcome(task, killed_reason(limit), attempt), submitted)
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

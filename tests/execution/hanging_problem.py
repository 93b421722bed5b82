"""A run that blocks in native code for a minute as it starts, where its alarm (a Python signal
handler) cannot reach it: a run_timeout_s test for a run that only a kill ends.

It waits on a mutex its own thread holds (`pthread_mutex_timedlock` retries after a signal, where
`libc.sleep` would return early). It blocks first thing, so that a loaded machine (the run's
imports) cannot delay it past the limit. Ray workers register the problem through `register`;
each attempt appends its process id to $WDRBO_TEST_ATTEMPTS, as raising_problem.py's problems do.
"""

from __future__ import annotations

import ctypes
import time
from typing import ClassVar

from raising_problem import count_attempt

from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.problems.camel import ThreeHumpCamel

HANG_S = 60.0


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def block_in_native_code(seconds: float) -> None:
    """Hold the calling thread in libc for `seconds`, signals or not (Linux, glibc)."""
    libc = ctypes.CDLL(None, use_errno=True)
    mutex = ctypes.create_string_buffer(64)  # a pthread_mutex_t, zeroed: PTHREAD_MUTEX_INITIALIZER
    assert libc.pthread_mutex_lock(mutex) == 0
    deadline = _Timespec(int(time.time() + seconds) + 1, 0)
    libc.pthread_mutex_timedlock(mutex, ctypes.byref(deadline))  # held by this thread: waits out the deadline


class NativeHangProblem(ThreeHumpCamel):
    """The problem of the hanging run (its run hangs before it computes anything)."""

    name: ClassVar[str] = "hangs"


def register() -> None:
    PROBLEMS["hangs"] = NativeHangProblem


def run_registered(spec):
    """The study's run function, with this problem registered where it runs (a pool process
    imports this module to unpickle it); a run of it blocks in native code."""
    from wdrbo_dist.driver.study import run_captured

    register()
    if spec.problem == "hangs":
        count_attempt()
        block_in_native_code(HANG_S)
    return run_captured(spec)

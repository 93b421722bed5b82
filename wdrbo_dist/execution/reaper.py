"""A reaper for the runner's own Ray: should the driver die (SIGKILL included), it kills the
processes `ray.init` started. Ray ends its GCS, raylet and workers with the driver, but the
raylet's two agents first try to report to the dead GCS and linger a minute. The reaper waits
for its stdin to close (the driver's end, or its Ray shut down) and then kills each process it
was given that still runs (by pid and start time: a reused pid is left alone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# It ignores Ctrl-C and SIGTERM, which the driver takes (and then shuts its Ray down itself).
_CODE = """import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdin.buffer.read()
sys.path.insert(0, sys.argv[1])
import psutil
for item in sys.argv[2:]:
    pid, started = item.split("@")
    try:
        process = psutil.Process(int(pid))
        if abs(process.create_time() - float(started)) < 0.5:
            process.kill()
    except psutil.Error:
        pass
"""


def _psutil_folder() -> str:
    """Where psutil is found (Ray keeps its own copy on its path)."""
    import psutil

    return os.path.dirname(os.path.dirname(psutil.__file__))


def _descendants() -> dict[int, float]:
    """This process's descendants: pid -> start time."""
    import psutil

    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            found[process.pid] = process.create_time()
        except psutil.Error:
            pass
    return found


@contextmanager
def reaping(started: list[subprocess.Popen]) -> Iterator[None]:
    """Around a block that starts processes (`ray.init`): a reaper of those it started is added
    to `started` (none where psutil is missing or nothing was started)."""
    try:
        before = _descendants()
    except ImportError:
        yield
        return
    yield
    new = {pid: at for pid, at in _descendants().items() if before.get(pid) != at}
    if not new:
        return
    try:
        started.append(subprocess.Popen(
            [sys.executable, "-c", _CODE, _psutil_folder(), *(f"{pid}@{at!r}" for pid, at in new.items())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
    except OSError:  # no reaper: Ray's own watchdogs end its processes, the agents a minute late
        pass


def stop(reapers: list[subprocess.Popen]) -> None:
    """Let each reaper do its work now (what it names is gone or going) and end."""
    while reapers:
        reaper = reapers.pop()
        try:
            reaper.stdin.close()  # type: ignore[union-attr]
            reaper.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass

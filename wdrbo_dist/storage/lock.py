"""One driver per output folder: an flock on the folder itself and on `<output_dir>/driver.lock`,
which names its holder.

A second driver on the same folder (another terminal, a resubmitted job) would run the first
one's runs again and mark its MLflow runs KILLED, so it stops with `FolderInUse` first.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = "driver.lock"


class FolderInUse(RuntimeError):
    """Another driver is at work on the output folder; the message names it, in one line."""


@contextmanager
def driver_lock(output_dir: str | os.PathLike[str], command: str | None = None) -> Iterator[Path | None]:
    """Hold `<output_dir>/driver.lock` for the body, or raise `FolderInUse` naming the holder.

    A second driver on the same folder would re-run what the first has in flight and mark
    the first's MLflow runs KILLED. The hold is an flock on the open file: the OS drops it
    when the process ends, however it ends (SIGKILL, out of memory), so a crashed driver leaves
    nothing stuck. The file only says who holds it (host, pid, start, command), for the
    message; it is never deleted, as a second process may be about to lock it. The folder's own
    descriptor is locked first, so that deleting the file lets no second driver in. The
    descriptors are close-on-exec, so the spawned pool and Ray processes never hold them.
    Yields the lock file, or None where the file system cannot lock (the caller warns).
    """
    path = Path(output_dir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    folder_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except BaseException:
        os.close(folder_fd)
        raise
    try:
        locked = _lock(folder_fd, path)
        locked = _lock(fd, path) and locked
        if locked:
            holder = {"host": socket.gethostname(), "pid": os.getpid(),
                      "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                      "command": command if command is not None else shlex.join(sys.argv)}
            try:  # the details only name the holder: a full disk must not stop the lock
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(holder).encode(), 0)
            except OSError:
                pass
        try:
            yield path if locked else None
        finally:
            if locked:
                try:
                    os.ftruncate(fd, 0)
                except OSError:
                    pass
    finally:
        os.close(fd)  # releases the flocks
        os.close(folder_fd)


def _lock(fd: int, path: Path) -> bool:
    """Take the flock without waiting: True, False where the file system has no locks, or
    `FolderInUse` while another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise FolderInUse(f"{path.parent} is in use by another driver ({_holder(path)}); "
                              "wait for it to end or stop it, then run again") from None
        return False
    return True


def _holder(path: Path, wait_s: float = 1.0) -> str:
    """The lock holder's details as one phrase (it writes them right after it locks)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            holder = json.loads(path.read_text())
            text = (f"pid {holder['pid']} on host {holder['host']}, started {holder['started']}, "
                    f"command: {holder['command']}")
            return " ".join(text.split())
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return f"a process that has not written its details to {path}"
            time.sleep(0.05)

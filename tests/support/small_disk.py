"""A small tmpfs mounted for one test: a real full disk or a real read-only file system.

Mounting needs root (or a user namespace); where it is refused, `mounted` yields False and the
test injects the write's error at the write instead.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def mounted(folder: Path, size: str = "1m", read_only: bool = False) -> Iterator[bool]:
    """A tmpfs of `size` at `folder` for the block (unmounted after); False where refused."""
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path, leave_bytes: int) -> None:
    """Fill the file system of `folder` until about `leave_bytes` are free."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    with open(folder / "filler", "wb") as handle:
        handle.write(b"\0" * max(0, free - leave_bytes))

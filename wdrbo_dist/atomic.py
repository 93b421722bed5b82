"""Files written atomically: to a temporary name beside the target, flushed to disk, renamed.

A reader sees the old file or the whole new one, never a part, even after a machine crash.
The file gets the mode a plain `open` would give (0666 less the umask), not mkstemp's 0600.
The result store, the study file and the single-run command write through these.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (else set and reset)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call `write(tmp)` on a temporary file beside `path`, flush it to disk, rename it to `path`.

    A reader sees the old file or the whole new one, never a part, even after a machine crash.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # others on shared storage read results as usual
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def write_parquet_atomic(frame: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write `frame` to `path` as parquet, atomically."""
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_json_atomic(payload: dict, path: str | os.PathLike[str]) -> None:
    """Write `payload` as JSON to `path`, atomically."""
    text = json.dumps(payload, indent=1, sort_keys=True, default=str)
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))

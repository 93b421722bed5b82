"""Files written atomically: to a temporary name beside the target, flushed to disk, renamed.

A reader sees the old file or the whole new one, never a part, even after a machine crash.
The file gets the mode a plain `open` would give (0666 less the umask), not mkstemp's 0600.
The result store, the study file and the single-run command write through these.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


# Where a folder cannot be opened or flushed at all (some network and Windows file systems), or is gone:
# nothing to make durable there. Any other error (EIO, ENOSPC) is the disk's, and raised.
UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EBADF, errno.EACCES, errno.EISDIR, errno.EPERM, errno.ENOENT}


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable; OSError when the disk fails it (a no-op where folders
    cannot be flushed)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as exc:
        if exc.errno in UNSUPPORTED:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise
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


def write_atomic(path: str | os.PathLike[str], write: Callable[[str], None], sync_dir: bool = True) -> None:
    """Call `write(tmp)` on a temporary file beside `path`, flush it to disk, rename it to `path`.

    A reader sees the old file or the whole new one, never a part, even after a machine crash.
    `sync_dir=False` leaves the rename's durability to a later `fsync_dir` of the same folder
    (two files renamed, one flush of their folder).
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
    if sync_dir:
        fsync_dir(target.parent)


def write_bytes_atomic(data: bytes, path: str | os.PathLike[str], sync_dir: bool = True,
                       reuse: Path | None = None) -> None:
    """Write `data` to `path`, atomically: the store's hot path, so one open of a temporary
    named by this process (only one process writes a folder: the driver holding its lock), whose
    mode the kernel sets from the umask. `reuse`, a file of the same file system nobody needs,
    becomes the temporary (renamed, emptied): no file is created, and none is left to delete."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if reuse is not None:
        try:
            os.replace(reuse, tmp)
        except OSError:  # gone: a new file, as without
            pass
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except FileNotFoundError:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(target.parent)


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    """`frame` as a parquet file, column by column: its columns are plain numbers, flags and
    strings, so no pandas metadata is kept (pandas reads it back with a fresh index), and
    this is about three times faster than `DataFrame.to_parquet` on a run's few rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({str(name): column.to_numpy() for name, column in frame.items()}), sink)
    return sink.getvalue().to_pybytes()


def write_parquet_atomic(frame: pd.DataFrame, path: str | os.PathLike[str], sync_dir: bool = True) -> None:
    """Write `frame` to `path` as parquet (`parquet_bytes`), atomically."""
    write_bytes_atomic(parquet_bytes(frame), path, sync_dir)


def write_json_atomic(payload: dict, path: str | os.PathLike[str], sync_dir: bool = True,
                      reuse: Path | None = None) -> None:
    """Write `payload` as JSON to `path`, atomically (one line: json's C encoder, which an indent
    would turn off: a run's meta is written per run, on the driver's hot path)."""
    text = json.dumps(payload, sort_keys=True, default=str)
    write_bytes_atomic(text.encode(), path, sync_dir, reuse)

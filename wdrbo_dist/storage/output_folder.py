"""A folder the commands write results to: checked before any work, and what a failed write keeps.

`check_folder` turns an unusable folder (a file in its path, no permission, a read-only file
system) into one line, raised before any run, as `check_same_study` does for a folder that
holds another study; `other_versions_line` names the runs an older version left there. A write
that fails during work (a full disk) becomes `OutputWriteError`; the finished run it was
writing goes to `keep_elsewhere` (a new folder under the temporary or home folder, named).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from wdrbo_dist import __version__
from wdrbo_dist.errors import one_line
from wdrbo_dist.storage.atomic import write_json_atomic

if TYPE_CHECKING:
    from wdrbo_dist.storage.store import ResultStore
    from wdrbo_dist.study.spec import StudySpec

class FolderUnusable(ValueError):
    """A folder the command must write to cannot be used; one line naming the field and why."""


class OutputWriteError(RuntimeError):
    """Writing into the output folder failed during work; one line (what, where, why)."""


def reason(exc: OSError) -> str:
    """The system's words for a write's error (pyarrow words its own, around the errno)."""
    if isinstance(exc.errno, int) and exc.errno > 0:
        return os.strerror(exc.errno)
    found = re.search(r"\[errno (\d+)\]", str(exc))
    return os.strerror(int(found.group(1))) if found else one_line(exc)


def check_folder(folder: str | os.PathLike[str], field: str = "output_dir") -> Path:
    """Raise `FolderUnusable` unless `folder` is, or can be created as, a folder one can write.

    Creates nothing: a probe file is written and removed in the folder, or in its nearest
    existing parent. Root ignores permission bits, so it writes instead of asking `os.access`.
    """
    path = Path(folder)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            what = "is a file" if part == path else f"cannot be created: {part} is a file"
            raise FolderUnusable(f"{field} {path}: {what}, not a folder; name a folder")
    existing = next((part for part in (path, *path.parents) if part.is_dir()), Path("."))
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise FolderUnusable(f"{field} {path}: cannot write {'there' if existing == path else 'to ' + str(existing)} "
                             f"({reason(exc)}); name a folder you can write to") from None
    return path


@contextmanager
def writing(what: str, folder: Path) -> Iterator[None]:
    """An OSError in the block becomes `OutputWriteError` naming `what` and `folder`."""
    try:
        yield
    except OSError as exc:
        raise OutputWriteError(f"cannot write {what} in {folder} ({reason(exc)})") from None


def keep_elsewhere(name: str, save: Callable[[Path], object]) -> tuple[Path | None, str]:
    """Call `save(folder)` on a new folder `wdrbo-dist-unsaved-<name>-<time>-<random>` made by
    `mkdtemp` (unpredictable, this user's alone, never through a link) under the temporary
    folder, else under the home folder: (the folder, "") or (None, why neither took it)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    why = ""
    for base in (Path(tempfile.gettempdir()), Path.home()):
        try:
            folder = Path(tempfile.mkdtemp(prefix=f"wdrbo-dist-unsaved-{name}-{stamp}-", dir=base))
            save(folder)
            return folder, ""
        except OSError as exc:
            why = f"{base}: {reason(exc)}"
    return None, why


class OtherStudy(ValueError):
    """The output folder holds another study's runs (its study.json names another study)."""


# What the runner writes in an output folder (`store`'s layout comment): anything else there is not ours.
OURS = {"runs", "failed", "compacted", "damaged", "discarded", "logs", "driver.lock", "study.json", "mlflow.json"}
SQLITE_SIDE_FILES = ("", "-journal", "-wal", "-shm")


def _tracking_files(study: "StudySpec") -> set[str]:
    """The names a sqlite tracking store inside the output folder adds there (its file, and the
    artifacts folder MLflow keeps beside it); a PostgreSQL store's artifacts folder."""
    uri = str(study.tracking_uri)
    if uri.startswith("postgresql"):
        return {"mlruns"}
    if not uri.startswith("sqlite:///"):
        return set()
    database = Path(uri[len("sqlite:///"):])
    if database.parent.resolve() != Path(study.output_dir).resolve():
        return set()
    return {database.name + side for side in SQLITE_SIDE_FILES} | {"mlruns"}


def check_same_study(study: "StudySpec") -> None:
    """One study per output folder, and never a folder of files the runner did not write: raise
    `OtherStudy` when its study.json names another study, is not the runner's, or when the
    folder holds anything else (the runner would overwrite or delete it).

    Two studies in one folder would overwrite each other's study.json, and a run both ask for
    would be logged in MLflow under the first one's name only.
    """
    folder = Path(study.output_dir)
    try:
        entries = [entry.name for entry in os.scandir(folder)]
    except OSError:
        return  # no folder yet (`check_folder` judges one that cannot be read)
    ours = OURS | _tracking_files(study)
    foreign = sorted(name for name in entries if name not in ours and not _our_temporary(name))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise OtherStudy(f"output_dir {folder} holds files the runner did not write ({shown}): name an empty "
                         f"folder, or the output folder of study {study.name!r}")
    path = folder / "study.json"
    if not path.exists():
        return
    try:
        held_file = json.loads(path.read_bytes())
        held = held_file["name"]
        if not isinstance(held, str) or "run_keys" not in held_file:
            raise ValueError(held)
    except (OSError, ValueError, KeyError, TypeError):
        raise OtherStudy(f"output_dir {folder}: its study.json is not one the runner wrote: name an empty folder, "
                         f"or the output folder of study {study.name!r}") from None
    if held != study.name:
        raise OtherStudy(f"output_dir {study.output_dir} holds study {held!r} ({path}), not {study.name!r}: "
                         f"one study per folder; give {study.name!r} another output_dir")


def _our_temporary(name: str) -> bool:
    """A temporary of an atomic write (`.<name>.<...>.tmp`) of a file the runner writes here."""
    return name.startswith(".") and name.endswith(".tmp") and name[1:].split(".", 1)[0] in {"study", "mlflow"}


def other_versions_line(store: "ResultStore") -> str:
    """One line naming the finished runs another package version left in the folder, or ""."""
    counts = store.other_versions()
    if not counts:
        return ""
    found = ", ".join(f"{n} of version {v}" for v, n in sorted(counts.items()))
    return (f"note: {store.root} holds {sum(counts.values())} finished runs of another version ({found}); "
            f"this version ({__version__}) does not reuse them (the version is part of a run's key): "
            "to keep them apart give this study another output_dir, or run anew here beside them")


def write_study_file(study: "StudySpec") -> None:
    """The study's config beside its runs (`study.json`), so the output folder explains itself."""
    write_json_atomic(
        {"name": study.name, "config": study.raw, "source": str(study.source or ""),
         "run_keys": [r.run_key for r in study.runs]},
        Path(study.output_dir) / "study.json",
    )

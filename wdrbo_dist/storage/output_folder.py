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
    """Call `save(folder)` on a new folder `wdrbo-dist-unsaved/<name>-<time>` under the temporary
    folder, else under the home folder: (the folder, "") or (None, why neither took it)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    why = ""
    for base in (Path(tempfile.gettempdir()), Path.home()):
        folder = base / "wdrbo-dist-unsaved" / f"{name}-{stamp}-{os.getpid()}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            save(folder)
            return folder, ""
        except OSError as exc:
            why = f"{folder}: {reason(exc)}"
    return None, why


class OtherStudy(ValueError):
    """The output folder holds another study's runs (its study.json names another study)."""


def check_same_study(study: "StudySpec") -> None:
    """One study per output folder: raise `OtherStudy` when its study.json names another.

    Two studies in one folder would overwrite each other's study.json, and a run both ask for
    would be logged in MLflow under the first one's name only.
    """
    path = Path(study.output_dir) / "study.json"
    try:
        held = json.loads(path.read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        return  # no study yet (or an unreadable file, rewritten by the run)
    if isinstance(held, str) and held != study.name:
        raise OtherStudy(f"output_dir {study.output_dir} holds study {held!r} ({path}), not {study.name!r}: "
                         f"one study per folder; give {study.name!r} another output_dir")


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

"""What makes a stored file whole: a run's meta read back and checked (its seal, status, key
and spec), and `Damage`, one line naming a file that is not whole and the files that go with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wdrbo_dist import __version__
from wdrbo_dist.errors import one_line
from wdrbo_dist.storage.integrity import seal_problem
from wdrbo_dist.storage.run_files import spec_from_dict


FileSignature = tuple[int, int, int] | None  # inode, size, mtime (ns) of a file; None: no file


@dataclass(frozen=True)
class Damage:
    """A stored file of a run that does not read back whole or disagrees with its partner."""

    run_key: str
    path: Path  # the file at fault
    problem: str  # what is wrong with it, in a few words
    label: str = ""  # the run's label where its meta could be read
    companions: tuple[Path, ...] = ()  # files set aside with it (the rest of a compaction round)

    def line(self, root: Path, label: str = "") -> str:
        """One line for the user: the run, the file (relative to the output folder), the fault."""
        if not self.run_key:  # a compacted file: many runs
            return f"damaged file {self.path.relative_to(root)}: {self.problem} (its runs run again)"
        name = label or self.label or "?"
        return f"damaged run {name} [{self.run_key}]: {self.path.relative_to(root)}: {self.problem}"


def signature(path: Path) -> FileSignature:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def stems(folder: Path) -> set[str]:
    """The run keys of the json files in `folder` (temporary files start with a dot)."""
    if not folder.is_dir():
        return set()
    return {p.stem for p in folder.glob("*.json") if not p.name.startswith(".")}


def read_meta_file(path: Path, run_key: str, status: str) -> tuple[dict[str, Any] | None, str]:
    """(meta, "") when the json at `path` is whole for `run_key` with `status`; else (None, why).

    The spec's hash is compared with the key only for a file this version wrote (the version
    is part of the key); an older version's runs have keys no study of this version asks for.
    """
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"not readable JSON ({one_line(exc, named=True)})"
    if not isinstance(meta, dict):
        return None, f"not a JSON object but {type(meta).__name__}"
    if meta.get("status") != status:
        return None, f"status is {meta.get('status')!r}, expected {status!r}"
    if meta.get("run_key") != run_key:
        return None, f"its run_key is {meta.get('run_key')!r}, not the file's name"
    try:
        spec = spec_from_dict(meta["spec"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return None, f"its spec cannot be read ({one_line(exc, named=True)})"
    if meta.get("version") == __version__ and spec.run_key != run_key:
        return None, f"its spec hashes to {spec.run_key}, not the file's name"
    if seal_problem(meta):  # last: the checks above name a fault more precisely
        return None, seal_problem(meta)
    return meta, ""


def new_folder(base: Path) -> Path:
    """`base`, or `base-2`, `base-3`, ... : a folder that did not exist, now created."""
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")

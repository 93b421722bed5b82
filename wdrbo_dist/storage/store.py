"""The canonical result store: one parquet file of per-step records per run, written atomically.

Under `<out>/`: `runs/<run_key>.parquet` and `.json` (records and meta of a finished run),
`failed/<run_key>.json`, `compacted/` (finished runs moved into one dataset: `compacted`),
`damaged/<time>/` (files set aside, kept) and `driver.lock` (`folder_lock`). Each file is
written atomically (`atomic`), parquet first, so a crash never leaves a half-written result.
Only the driver writes here. The comment above `ResultStore` gives the layout, what makes a run
finished or damaged, and the meta's fields.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from wdrbo_dist import __version__
from wdrbo_dist.errors import one_line
from wdrbo_dist.storage.atomic import fsync_dir, parquet_bytes, write_bytes_atomic, write_json_atomic
from wdrbo_dist.storage.checks import Damage, FileSignature, new_folder, read_meta_file, signature, stems
from wdrbo_dist.storage.compacted import CompactedRuns
from wdrbo_dist.storage.integrity import RECORDS_CHECKSUM, digest, file_digest, seal
from wdrbo_dist.run.spec import RunResult
from wdrbo_dist.storage.run_files import result_meta, spec_from_dict


# Layout under a study's output folder:
#     <out>/runs/<run_key>.parquet        the records of a finished run (canonical data)
#     <out>/runs/<run_key>.json           its meta: run_key, label, status, spec, summary, ...
#     <out>/failed/<run_key>.json         a failed run's meta, `error` holding its traceback
#                                         (removed when the run later finishes)
#     <out>/compacted/                    finished runs compacted (`compact`): their records in
#                                         one parquet dataset, their meta in its index
#     <out>/damaged/<time>/...            files found damaged, set aside by the driver (kept)
#     <out>/discarded/                    compacted runs' own files, deleted at the end of the
#                                         command (`discard`; no reader looks here)
#     <out>/driver.lock                   held by the one driver at work on this folder
#
# Both files are written to a temporary name, flushed to disk and renamed, parquet first, so a
# crash (even of the machine) never leaves a half-written result, and a json marker never
# points at a missing parquet. Only the driver writes here: workers return their results to it.
#
# A run is finished exactly when its files read back whole and agree: the json is a JSON
# object with status FINISHED, its run_key and the key its spec hashes to are the file's name
# (the hash is checked for files this version wrote: the version is part of the key), and the
# parquet's footer reads and counts the json's `rows` (the spec's `evaluations` for a meta
# without them). Only the footer is read, not the data (960 runs: about 0.5 s, reading them: 5 s),
# so a file cut short is caught, a flipped bit inside a data page is not. A failure marker is
# whole when it is a JSON object with status FAILED and the right run_key and spec. Files
# that are not whole are `damaged`: the driver reports them, moves them aside with
# `set_aside` (a damaged file may be the only trace of a run, so it is never deleted) and runs
# those runs again. A parquet without its json is what a crash between the two renames leaves:
# not finished, not damaged, overwritten when the run is done again.
#
# The meta JSON (`read_meta`) holds:
#     run_key, label, status ("FINISHED" | "FAILED"), spec (every RunSpec field, options as a
#     dict: what the user gave), options (every option the run used, RunResult.options),
#     summary (RunResult.summary()), error (traceback or null), wall_time_s, warm_up_s (the
#     seconds before it: a process's first run of a cell warms up, run/loop.warm_up), started_at,
#     saved_at (unix times), host, pid, version (the package's), rows.
TEMPORARY_NAME = re.compile(r"^\.(?:[0-9a-f]{16}\.(?:json|parquet)|round-\d+\.(?:json|parquet)|study\.json|mlflow\.json)"
                            r"\.[^/]*\.tmp$")  # `atomic`'s temporaries of the files the store writes
DISCARDED_NAME = re.compile(r"^[0-9a-f]{16}\.(?:json|parquet)$")  # <run_key>.<ext>, as `_discard` names them


class ResultStore:
    """The runs of one study's output folder (see the module docstring for the layout)."""

    def __init__(self, output_dir: str | os.PathLike[str]) -> None:
        self.root = Path(output_dir)
        self.runs_dir = self.root / "runs"
        self.failed_dir = self.root / "failed"
        self.discarded_dir = self.root / "discarded"
        self._whole: dict[str, tuple[FileSignature, FileSignature]] = {}  # key -> files found whole
        self._versions: dict[str, str] = {}  # key -> the version that wrote it, of the runs found whole
        self.compacted = CompactedRuns(self.root)
        # (meta, records) of the runs saved since the last compaction: what `compact` need not read back
        self._saved: dict[str, tuple[dict[str, Any], pd.DataFrame]] = {}
        self._markers: set[str] | None = None  # `_failure_markers`
        self._spares: list[Path] = []  # files this store moved to discarded/, for `save` to reuse

    # --- paths ---------------------------------------------------------------------------------
    def records_path(self, run_key: str) -> Path:
        return self.runs_dir / f"{run_key}.parquet"

    def meta_path(self, run_key: str) -> Path:
        return self.runs_dir / f"{run_key}.json"

    def failed_path(self, run_key: str) -> Path:
        return self.failed_dir / f"{run_key}.json"

    # --- writing -------------------------------------------------------------------------------
    def save(self, result: RunResult) -> Path:
        """Make `result` durable; returns the file that marks it (json meta).

        A finished run: parquet, then json (each flushed to disk before its rename, their folder
        once after both: a json whose parquet a crash lost is a damaged run, run again), then
        the failure marker (if any) is removed.
        A failed run: only a failure marker; an earlier finished result of the same key is
        kept (equal keys mean equal records, so it stays valid).
        """
        key = result.spec.run_key
        meta = result_meta(result)
        if result.ok:
            if result.records is None:
                raise ValueError(f"{result.spec.label}: a FINISHED result must carry records")
            data = result.records_parquet if result.records_parquet is not None else parquet_bytes(result.records)
            meta = seal({**meta, RECORDS_CHECKSUM: digest(data)})
            write_bytes_atomic(data, self.records_path(key), sync_dir=False, reuse=self._spare_file())
            write_json_atomic(meta, self.meta_path(key), reuse=self._spare_file())  # flushes runs/: both renames
            if key in self._failure_markers():
                self.failed_path(key).unlink(missing_ok=True)
                self._markers.discard(key)  # type: ignore[union-attr]
            self._saved[key] = (meta, result.records)
            # Whole as written (checked again once either file changes): a compaction need not read them back.
            self._whole[key] = (signature(self.meta_path(key)), signature(self.records_path(key)))
            self._versions[key] = __version__
            return self.meta_path(key)
        write_json_atomic(seal(meta), self.failed_path(key))
        self._failure_markers().add(key)
        return self.failed_path(key)

    def _failure_markers(self) -> set[str]:
        """The run keys with a failure marker, listed once (then kept by `save`, the folder's one
        writer): a finished run's save need not try to delete a marker that is not there."""
        if self._markers is None:
            self._markers = {p.stem for p in self.failed_dir.glob("*.json")} if self.failed_dir.is_dir() else set()
        return self._markers

    # --- queries -------------------------------------------------------------------------------
    def loose_keys(self) -> set[str]:
        """The finished runs in their own files (not yet compacted)."""
        return {key for key in stems(self.runs_dir) if self._finished_damage(key) is None}

    def finished_keys(self) -> set[str]:
        """Run keys whose files read back whole and agree: the finished runs, loose or compacted
        (loose first: a run compacted meanwhile is then in the index)."""
        loose = self.loose_keys()
        return loose | self.compacted.keys()

    def compact(self) -> int:
        """Move the loose finished runs into the compacted dataset (one round); returns how many.

        The compacted runs' own files go to discarded/ (`_discard`), as do loose files of runs
        the index holds (a crash after a round's commit); record files no round names (a crash
        before it) are deleted. The driver calls this under the folder's lock."""
        loose = self.loose_keys()
        leftovers = self.leftovers(loose)
        runs = []
        for key in sorted(loose - leftovers):  # a run done again (--force, damaged) replaces its compacted copy
            saved = self._saved.get(key)
            runs.append(saved if saved is not None else (self.read_meta(key), self.read_records(key)))
        moved = self.compacted.add_round(runs)
        if moved or leftovers:
            self.discarded_dir.mkdir(exist_ok=True)
        for key in [*moved, *leftovers]:
            self._discard(self.meta_path(key))  # the marker first: a parquet alone is no run
            self._discard(self.records_path(key))
            self._whole.pop(key, None)
        if moved or leftovers:
            fsync_dir(self.runs_dir)
        self.compacted.remove_uncommitted()
        self._saved.clear()
        return len(moved)

    def leftovers(self, loose: set[str] | None = None) -> set[str]:
        """Loose runs whose compacted copy was committed from these very files: what a crash
        after a round left before moving them (the next compaction moves them)."""
        loose = self.loose_keys() if loose is None else loose
        return {key for key in loose & self.compacted.keys() if self._same_as_compacted(key)}

    def _same_as_compacted(self, run_key: str) -> bool:
        """Whether a loose run's files are the copy its compacted row was made from (saved at the
        same time), not a later run of the same key."""
        compacted = self.compacted.meta(run_key) or {}
        saved = self._saved.get(run_key)
        loose = saved[0] if saved is not None else json.loads(self.meta_path(run_key).read_bytes())
        return loose.get("saved_at") == compacted.get("saved_at")

    def _discard(self, path: Path) -> None:
        """Move a compacted run's file out of runs/: the next runs' files reuse it (`save`), and
        `empty_discarded` deletes what is left at the end of the command.

        Deleting it now would slow the study down on ext4 without a journal (this project's
        test machines): there, creating a file scans the inodes deleted in the last minute or
        more, and a study at 140 runs a second deletes 280 a second (perf: `recently_deleted`
        under `__ext4_new_inode`; each new run's two files cost the driver ~3 ms at 10^4 runs).
        Reused, a file is neither created nor deleted (10^5 runs: 2 x 10^5 of each, a minute)."""
        try:
            os.replace(path, self.discarded_dir / path.name)
        except FileNotFoundError:  # gone already
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            path.unlink()  # runs/ on another file system: its compacted copy is committed, delete it now
            return
        self._spares.append(self.discarded_dir / path.name)

    def _spare_file(self) -> Path | None:
        return self._spares.pop() if self._spares else None

    def remove_temporaries(self) -> int:
        """Delete the temporaries of atomic writes a crash left (`.<file>.<...>.tmp` beside a file
        the store writes, and nothing else); the driver calls it under the folder's lock."""
        folders = [self.root, self.runs_dir, self.failed_dir, self.compacted.index_dir]
        if self.compacted.records_dir.is_dir():
            folders += [p for p in self.compacted.records_dir.iterdir() if p.is_dir()]
        removed = 0
        for folder in folders:
            try:
                names = [entry.name for entry in os.scandir(folder)]
            except OSError:
                continue
            for name in names:
                if TEMPORARY_NAME.match(name):
                    (folder / name).unlink(missing_ok=True)
                    removed += 1
        return removed

    def empty_discarded(self) -> int:
        """Delete the files `compact` moved aside (at the end of a command, and what a crash
        left); returns how many."""
        removed, self._spares = 0, []
        try:
            entries = list(os.scandir(self.discarded_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if not DISCARDED_NAME.match(entry.name):  # only the files `_discard` moved here
                continue
            try:
                os.unlink(entry.path)
                removed += 1
            except OSError:  # gone already, or not ours to delete: the next command tries again
                pass
        return removed

    def failed_keys(self) -> set[str]:
        """Run keys whose latest attempt failed (and that have not finished since)."""
        failed = {key for key in stems(self.failed_dir) if self._failed_damage(key) is None}
        return {key for key in failed if not self.is_finished(key)}

    def other_versions(self) -> dict[str, int]:
        """{version: finished runs} of the finished runs here that another package version wrote."""
        counts: dict[str, int] = {}
        for key in self.loose_keys():
            version = self._versions.get(key, __version__)
            if version != __version__:
                counts[version] = counts.get(version, 0) + 1
        index = self.compacted.index()
        for version, n in index.loc[~index.index.isin(self._versions), "version"].value_counts().items():
            if version != __version__:
                counts[str(version)] = counts.get(str(version), 0) + int(n)
        return counts

    def is_finished(self, run_key: str) -> bool:
        if self.meta_path(run_key).is_file() and self._finished_damage(run_key) is None:
            return True
        return run_key in self.compacted.index().index

    def damaged(self, keys: Iterable[str] | None = None) -> list[Damage]:
        """The files of `keys` (default: every run here) that are not whole, runs/ first."""
        finished, failed = stems(self.runs_dir), stems(self.failed_dir)
        if keys is not None:
            wanted = set(keys)
            finished, failed = finished & wanted, failed & wanted
        found = [self._finished_damage(k) for k in sorted(finished)] + [self._failed_damage(k) for k in sorted(failed)]
        self.compacted.index(refresh=True)
        found += [Damage("", path, problem, companions=members) for path, members, problem in self.compacted.damaged]
        return [d for d in found if d is not None]

    def set_aside(self, damages: Sequence[Damage]) -> Path | None:
        """Move damaged files into a new `damaged/<time>/` (runs/ and failed/ inside, as here).

        A damaged finished run moves with its partner file, so that it is simply not there and
        runs again. Returns the folder, or None when there was nothing to move.
        """
        if not damages:
            return None
        folder = new_folder(self.root / "damaged" / time.strftime("%Y%m%d-%H%M%S"))
        sources: set[Path] = set()
        for damage in damages:
            pair = damage.path.parent == self.runs_dir
            paths = [self.meta_path(damage.run_key), self.records_path(damage.run_key)] if pair else \
                [damage.path, *damage.companions]
            for path in paths:
                if path.exists():  # kept under its place in the folder: runs/, failed/, compacted/...
                    target = folder / path.relative_to(self.root)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, target)
                    sources.add(path.parent)
        for changed in (*sources, *(p for p in folder.rglob("*") if p.is_dir()), folder, folder.parent):
            fsync_dir(changed)
        return folder

    def _finished_damage(self, run_key: str) -> Damage | None:
        """What is wrong with a run's runs/ files, if anything (remembered while they are unchanged)."""
        meta_path, records_path = self.meta_path(run_key), self.records_path(run_key)
        found = (signature(meta_path), signature(records_path))
        if self._whole.get(run_key) == found:
            return None
        meta, problem = read_meta_file(meta_path, run_key, "FINISHED")
        if meta is None:
            return Damage(run_key, meta_path, problem)
        label = str(meta.get("label", ""))
        if found[1] is None:
            return Damage(run_key, meta_path, "its parquet is missing", label)
        try:  # every byte: what the json's checksum says the parquet held (older files: their footer)
            whole = RECORDS_CHECKSUM in meta and file_digest(records_path) == meta[RECORDS_CHECKSUM]
        except OSError:
            whole = False
        if not whole:
            try:
                rows = pq.read_metadata(records_path).num_rows
            except (OSError, ValueError, pa.ArrowException) as exc:
                return Damage(run_key, records_path, f"not a readable parquet file ({one_line(exc, named=True)})", label)
            expected = meta["rows"] if "rows" in meta else meta["spec"].get("evaluations")
            if rows != expected:
                return Damage(run_key, records_path, f"has {rows} rows, its json says {expected}", label)
            if RECORDS_CHECKSUM in meta:
                return Damage(run_key, records_path, "its bytes do not match the checksum in its json", label)
        self._whole[run_key] = found
        self._versions[run_key] = str(meta.get("version", "?"))
        return None

    def _failed_damage(self, run_key: str) -> Damage | None:
        """What is wrong with a run's failure marker, if anything."""
        path = self.failed_path(run_key)
        meta, problem = read_meta_file(path, run_key, "FAILED")
        return None if meta is not None else Damage(run_key, path, problem)

    def read_records(self, run_key: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The per-step records of a finished run (`columns` only, where given); ValueError (one
        line) for files that no longer match their checksums."""
        try:
            if self.meta_path(run_key).is_file():
                damage = self._finished_damage(run_key)  # a stat when unchanged since checked
                if damage is not None:
                    raise ValueError(damage.line(self.root))
            return pd.read_parquet(self.records_path(run_key), columns=None if columns is None else list(columns))
        except FileNotFoundError:
            if run_key not in self.compacted.index(refresh=True).index:
                raise
            return self.compacted.records(run_key, columns)

    def read_meta(self, run_key: str) -> dict[str, Any]:
        """The meta of a finished run (loose, else compacted), or else of its failure."""
        try:
            return json.loads(self.meta_path(run_key).read_text())
        except FileNotFoundError:
            pass
        meta = self.compacted.meta(run_key)
        if meta is None:  # compacted since the index was read?
            self.compacted.index(refresh=True)
            meta = self.compacted.meta(run_key)
        if meta is not None:
            return {k: v for k, v in meta.items() if k != "columns"}
        try:
            return json.loads(self.failed_path(run_key).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no run {run_key} in {self.root}") from None

    def read_result(self, run_key: str) -> RunResult:
        """A stored run back as a RunResult (what the tracker logs when it catches up)."""
        meta = self.read_meta(run_key)
        records = self.read_records(run_key) if meta["status"] == "FINISHED" else None
        return RunResult(
            spec=spec_from_dict(meta["spec"]),
            status=meta["status"],
            records=records,
            error=meta.get("error"),
            options=dict(meta.get("options") or {}),
            wall_time_s=float(meta.get("wall_time_s", 0.0)),
            warm_up_s=float(meta.get("warm_up_s", 0.0)),
            started_at=float(meta.get("started_at", 0.0)),
            host=meta.get("host", ""),
            pid=int(meta.get("pid", 0)),
        )

"""Finished runs compacted: one parquet dataset, partitioned by problem, with an index of its runs.

A study of 10^5 runs is 2 * 10^5 small files; a report that opens each takes minutes. A round
moves finished runs' records into `compacted/records/problem=<p>/round-<n>.parquet` (a `run_key`
column added) and their meta into `compacted/index/round-<n>.parquet`; its manifest,
`index/round-<n>.json`, names each file's SHA-256 and is the round's commit, written last (files
of a round without one are deleted: the runs' loose files still hold them). A file that does not
match its checksum is damaged: its runs are not served, and the driver sets it aside (with its
round, for an index or manifest) and runs them again. Round numbers are never reused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from wdrbo_dist.storage.atomic import fsync_dir, parquet_bytes, write_bytes_atomic, write_json_atomic
from wdrbo_dist.storage.integrity import VerifiedFiles, digest, seal, seal_problem

INDEX_COLUMNS = ["run_key", "problem", "algorithm", "file", "rows", "version", "wall_time_s", "meta"]
_ROUND = re.compile(r"^round-(\d+)\.(?:parquet|json)$")


def _round_number(path: Path) -> int | None:
    found = _ROUND.match(path.name)
    return int(found.group(1)) if found else None


def _safe(name: str) -> str:
    """A folder name for a partition value (problem names are plain, but be sure)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _records_table(members: Sequence[tuple[dict[str, Any], pd.DataFrame]]) -> pa.Table:
    """The records of `members` in one table with a `run_key` column: the runs of one schema
    are joined by pandas and converted once (a conversion per run cost more than the rest of
    a round); tables of different schemas (another version's runs) are joined by Arrow, a
    column missing from one run null there."""
    by_schema: dict[tuple[tuple[Any, ...], tuple[Any, ...]], list[tuple[str, pd.DataFrame]]] = {}
    for meta, records in members:
        schema = (tuple(records.columns), tuple(records.dtypes))  # dtypes compare (and hash) as dtypes
        by_schema.setdefault(schema, []).append((str(meta["run_key"]), records))
    tables = []
    for group in by_schema.values():
        frame = pd.concat([records for _, records in group], ignore_index=True)
        keys = np.repeat([key for key, _ in group], [len(records) for _, records in group])
        columns = {str(name): column.to_numpy() for name, column in frame.items()}
        tables.append(pa.table({**columns, "run_key": keys.astype(str)}))
    return pa.concat_tables(tables, promote_options="default")


class CompactedRuns:
    """The compacted runs of one output folder: their index and their records."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / "compacted"
        self.index_dir = self.folder / "index"
        self.records_dir = self.folder / "records"
        self._index: pd.DataFrame | None = None
        self._rounds: tuple[str, ...] = ()
        self._digests: dict[str, str] = {}  # record file (relative to compacted/) -> its SHA-256
        self._verified = VerifiedFiles()
        # Files that do not match their checksum: (the file at fault, the files set aside with it, why)
        self.damaged: list[tuple[Path, tuple[Path, ...], str]] = []

    # --- reading -------------------------------------------------------------------------------
    def _manifests(self) -> list[Path]:
        """The committed rounds' manifests, in round order."""
        if not self.index_dir.is_dir():
            return []
        found = [p for p in self.index_dir.iterdir() if p.suffix == ".json" and _round_number(p) is not None]
        return sorted(found, key=lambda p: _round_number(p))  # type: ignore[arg-type, return-value]

    def _round_members(self, number: int) -> tuple[Path, ...]:
        """Every file of round `number` on disk: its manifest, index and record files."""
        name = f"round-{number}"
        members = [p for p in (self.index_dir / f"{name}.json", self.index_dir / f"{name}.parquet") if p.exists()]
        if self.records_dir.is_dir():
            members += sorted(self.records_dir.glob(f"*/{name}.parquet"))
        return tuple(members)

    def index(self, refresh: bool = False) -> pd.DataFrame:
        """Every compacted run whose files match their checksums (one row each: INDEX_COLUMNS),
        the latest round's row of a run compacted twice; read again when a round was added."""
        manifests = self._manifests()
        names = tuple(p.name for p in manifests)
        if self._index is None or refresh or names != self._rounds:
            frames, self.damaged, self._digests = [], [], {}
            for path in manifests:
                frame = self._read_round(path)
                if frame is not None:
                    frames.append(frame)
            frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=INDEX_COLUMNS)
            frame = frame.drop_duplicates("run_key", keep="last")
            whole = {f for f in set(frame["file"].tolist()) if self._whole(f)}
            self._index = frame[frame["file"].isin(whole)].set_index("run_key", drop=False)
            self._rounds = names
        return self._index

    def _read_round(self, manifest_path: Path) -> pd.DataFrame | None:
        """A committed round's index rows, or None (and the round's files in `damaged`) when its
        manifest or its index does not match."""
        number = _round_number(manifest_path)
        index_path = self.index_dir / f"round-{number}.parquet"
        at_fault, problem, frame = manifest_path, "", None
        try:
            manifest = json.loads(manifest_path.read_bytes())
            problem = seal_problem(manifest) or ("" if manifest.get("round") == number else "names another round")
            if not problem:
                at_fault = index_path
                problem = self._verified.problem(index_path, str(manifest["index"]["sha256"]))
            if not problem:
                frame = pd.read_parquet(index_path).reindex(columns=INDEX_COLUMNS)
                self._digests.update({str(k): str(v) for k, v in manifest["records"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException) as exc:
            problem = f"not readable ({type(exc).__name__})"
        if problem:
            self.damaged.append((at_fault, self._round_members(number), problem))  # type: ignore[arg-type]
        return frame

    def _whole(self, relative: str) -> bool:
        """Whether a record file matches its checksum (a missing one was set aside: its runs run again)."""
        path = self.folder / relative
        expected = self._digests.get(relative)
        if not path.exists():
            return False
        problem = "no checksum in its round's manifest" if expected is None else self._verified.problem(path, expected)
        if problem:
            self.damaged.append((path, (path,), problem))
            return False
        return True

    def _checked(self, relative: str) -> Path:
        """The path of a record file about to be read, checked against its checksum again if it
        changed since `index` found it whole; ValueError (one line) when it no longer matches."""
        if not self._whole(relative):
            self._index = None  # read again: its runs are not finished any more
            raise ValueError(f"{self.folder / relative}: damaged since the index was read; its runs run again")
        return self.folder / relative

    def keys(self) -> set[str]:
        return set(self.index()["run_key"].tolist())  # a list first: Arrow strings iterate slowly

    def meta(self, run_key: str) -> dict[str, Any] | None:
        index = self.index()
        if run_key not in index.index:
            return None
        return json.loads(index.at[run_key, "meta"])

    def records(self, run_key: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """One compacted run's records, with the columns it was stored with."""
        index = self.index()
        row = (index if run_key in index.index else self.index(refresh=True)).loc[run_key]
        meta = json.loads(row["meta"])
        wanted = list(columns) if columns is not None else list(meta["columns"])
        table = pq.read_table(self._checked(row["file"]), columns=["run_key", *wanted],
                              filters=[("run_key", "=", run_key)])
        return table.drop(["run_key"]).to_pandas()

    def scan(self, keys: Iterable[str], columns: Sequence[str]) -> pd.DataFrame:
        """The records (`columns` and `run_key`) of the compacted `keys`, in one read of their files."""
        index = self.index()
        wanted = index[index["run_key"].isin(set(keys))]
        if wanted.empty:
            return pd.DataFrame(columns=[*columns, "run_key"])
        files = [str(self._checked(f)) for f in sorted(set(wanted["file"]))]
        tables = [pq.read_table(f, columns=["run_key", *columns]) for f in files]
        frame = pa.concat_tables(tables, promote_options="default").to_pandas()
        return frame[frame["run_key"].isin(set(wanted["run_key"]))].reset_index(drop=True)

    def parts(self) -> set[str]:
        """The record files the index names (relative to `compacted/`)."""
        return set(self.index()["file"].tolist())

    # --- writing (the driver, under the folder's lock) -------------------------------------------
    def _next_round(self) -> int:
        """One more than any round number this folder has seen, set-aside rounds included."""
        numbers = [_round_number(p) for p in self.index_dir.glob("round-*")] if self.index_dir.is_dir() else []
        if self.records_dir.is_dir():
            numbers += [_round_number(p) for p in self.records_dir.glob("*/round-*.parquet")]
        damaged = self.root / "damaged"
        if damaged.is_dir():
            numbers += [_round_number(p) for p in damaged.glob("*/compacted/**/round-*")]
        return max((n for n in numbers if n is not None), default=0) + 1

    def add_round(self, runs: Sequence[tuple[dict[str, Any], pd.DataFrame]]) -> list[str]:
        """Compact `runs` ((meta, records) of finished runs) as one new round; returns their keys.

        The records of a problem's runs go to one file, then the round's index, then its
        manifest (the commit): each written atomically and flushed."""
        if not runs:
            return []
        before = self._manifests()
        number = self._next_round()
        name = f"round-{number}.parquet"
        by_problem: dict[str, list[tuple[dict[str, Any], pd.DataFrame]]] = {}
        for meta, records in runs:
            by_problem.setdefault(str(meta["spec"]["problem"]), []).append((meta, records))
        rows, digests = [], {}
        for problem, members in by_problem.items():
            relative = f"records/problem={_safe(problem)}/{name}"
            sink = pa.BufferOutputStream()
            pq.write_table(_records_table(members), sink)
            data = sink.getvalue().to_pybytes()
            target = self.folder / relative
            fresh_folder = not target.parent.is_dir()
            write_bytes_atomic(data, target)
            if fresh_folder:  # the new partition folder's own entry, durable in its parent
                fsync_dir(target.parent.parent)
            digests[relative] = digest(data)
            self._verified.trust(target, digests[relative])
            for meta, records in members:
                rows.append({
                    "run_key": meta["run_key"], "problem": problem, "algorithm": str(meta["spec"]["algorithm"]),
                    "file": relative, "rows": int(len(records)), "version": str(meta.get("version", "?")),
                    "wall_time_s": float(meta.get("wall_time_s") or 0.0),
                    "meta": json.dumps({**meta, "columns": list(records.columns)}),
                })
        added = pd.DataFrame(rows, columns=INDEX_COLUMNS)
        index_data = parquet_bytes(added)
        fresh_folder = not self.index_dir.is_dir()
        write_bytes_atomic(index_data, self.index_dir / name)
        if fresh_folder:
            fsync_dir(self.folder)
            fsync_dir(self.root)
        write_json_atomic(seal({"round": number, "index": {"file": f"index/{name}", "sha256": digest(index_data)},
                                "records": digests}), self.index_dir / f"round-{number}.json")
        self._verified.trust(self.index_dir / name, digest(index_data))
        self._digests.update(digests)
        if self._index is not None and self._rounds == tuple(p.name for p in before):
            # The index as read, plus this round (its files were just written whole): a round
            # need not read every earlier round again (10^5 runs: 100 rounds, 5,050 reads).
            frame = pd.concat([self._index, added.set_index("run_key", drop=False)])
            self._index = frame[~frame.index.duplicated(keep="last")]
            self._rounds = (*self._rounds, f"round-{number}.json")
        else:
            self._index = None
        return [row["run_key"] for row in rows]

    def remove_uncommitted(self) -> int:
        """Delete the files of rounds without a manifest (what a crash mid-round leaves: their
        runs' loose files still hold them); returns how many."""
        committed = {_round_number(p) for p in self._manifests()}
        found = [*self.index_dir.glob("round-*.parquet")] if self.index_dir.is_dir() else []
        if self.records_dir.is_dir():
            found += self.records_dir.glob("*/round-*.parquet")
        removed = [p for p in found if _round_number(p) not in committed]
        for path in removed:
            path.unlink(missing_ok=True)
        for folder in {p.parent for p in removed}:
            fsync_dir(folder)
        return len(removed)

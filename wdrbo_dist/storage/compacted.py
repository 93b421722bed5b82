"""Finished runs compacted: one parquet dataset, partitioned by problem, with an index of its runs.

A study of 10^5 runs is 2 * 10^5 small files; a report that opens each takes minutes. A
compaction round moves the finished runs' records into `compacted/records/problem=<p>/round-<n>.parquet`
(a `run_key` column added) and their meta into `compacted/index/round-<n>.parquet`. The round's
index file is its commit: record files are written (atomically, flushed) first, so a crash leaves
at worst record files no index names, which the next round deletes, and a run whose loose files
are still there alongside its index row (the loose files are then deleted). Only the driver,
holding the folder's lock, compacts; readers take loose files first and the index after, so a
run compacted while they read is found in one form or the other.
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

from wdrbo_dist.storage.atomic import fsync_dir, write_atomic, write_parquet_atomic

INDEX_COLUMNS = ["run_key", "problem", "algorithm", "file", "rows", "version", "wall_time_s", "meta"]
_ROUND = re.compile(r"round-(\d+)\.parquet$")


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
        self.folder = root / "compacted"
        self.index_dir = self.folder / "index"
        self.records_dir = self.folder / "records"
        self._index: pd.DataFrame | None = None
        self._rounds: tuple[str, ...] = ()
        self.damaged: list[tuple[Path, str]] = []  # files of the index that do not read (`index`)

    # --- reading -------------------------------------------------------------------------------
    def _round_files(self) -> list[Path]:
        if not self.index_dir.is_dir():
            return []
        return sorted((p for p in self.index_dir.iterdir() if _ROUND.search(p.name) and not p.name.startswith(".")),
                      key=lambda p: int(_ROUND.search(p.name).group(1)))  # type: ignore[union-attr]

    def index(self, refresh: bool = False) -> pd.DataFrame:
        """Every compacted run whose files read (one row each: INDEX_COLUMNS), the latest round's
        row of a run compacted twice; read again when a round was added. A round or record file
        that does not read is in `damaged` (its runs are not finished: they run again)."""
        files = self._round_files()
        names = tuple(p.name for p in files)
        if self._index is None or refresh or names != self._rounds:
            frames, self.damaged = [], []
            for path in files:
                try:
                    frames.append(pd.read_parquet(path).reindex(columns=INDEX_COLUMNS))
                except (OSError, ValueError, pa.ArrowException) as exc:
                    self.damaged.append((path, f"not a readable parquet file ({type(exc).__name__})"))
            frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=INDEX_COLUMNS)
            frame = frame.drop_duplicates("run_key", keep="last")
            whole = {f for f in set(frame["file"].tolist()) if self._readable(f)}
            self._index = frame[frame["file"].isin(whole)].set_index("run_key", drop=False)
            self._rounds = names
        return self._index

    def _readable(self, relative: str) -> bool:
        path = self.folder / relative
        if not path.exists():
            return False  # set aside earlier: its runs run again
        try:
            pq.read_metadata(path)
        except (OSError, ValueError, pa.ArrowException) as exc:
            self.damaged.append((path, f"not a readable parquet file ({type(exc).__name__})"))
            return False
        return True

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
        table = pq.read_table(self.folder / row["file"], columns=["run_key", *wanted],
                              filters=[("run_key", "=", run_key)])
        return table.drop(["run_key"]).to_pandas()

    def scan(self, keys: Iterable[str], columns: Sequence[str]) -> pd.DataFrame:
        """The records (`columns` and `run_key`) of the compacted `keys`, in one read of their files."""
        index = self.index()
        wanted = index[index["run_key"].isin(set(keys))]
        if wanted.empty:
            return pd.DataFrame(columns=[*columns, "run_key"])
        files = [str(self.folder / f) for f in sorted(set(wanted["file"]))]
        tables = [pq.read_table(f, columns=["run_key", *columns]) for f in files]
        frame = pa.concat_tables(tables, promote_options="default").to_pandas()
        return frame[frame["run_key"].isin(set(wanted["run_key"]))].reset_index(drop=True)

    def parts(self) -> set[str]:
        """The record files the index names (relative to `compacted/`)."""
        return set(self.index()["file"].tolist())

    # --- writing (the driver, under the folder's lock) -------------------------------------------
    def add_round(self, runs: Sequence[tuple[dict[str, Any], pd.DataFrame]]) -> list[str]:
        """Compact `runs` ((meta, records) of finished runs) as one new round; returns their keys.

        The records of a problem's runs go to one file, then the round's index (the commit)."""
        if not runs:
            return []
        before = self._round_files()
        number = max((int(_ROUND.search(p.name).group(1)) for p in before), default=0) + 1  # type: ignore[union-attr]
        name = f"round-{number}.parquet"
        by_problem: dict[str, list[tuple[dict[str, Any], pd.DataFrame]]] = {}
        for meta, records in runs:
            by_problem.setdefault(str(meta["spec"]["problem"]), []).append((meta, records))
        rows = []
        for problem, members in by_problem.items():
            relative = f"records/problem={_safe(problem)}/{name}"
            table = _records_table(members)
            write_atomic(self.folder / relative, lambda tmp, table=table: pq.write_table(table, tmp))
            for meta, records in members:
                rows.append({
                    "run_key": meta["run_key"], "problem": problem, "algorithm": str(meta["spec"]["algorithm"]),
                    "file": relative, "rows": int(len(records)), "version": str(meta.get("version", "?")),
                    "wall_time_s": float(meta.get("wall_time_s") or 0.0),
                    "meta": json.dumps({**meta, "columns": list(records.columns)}),
                })
        added = pd.DataFrame(rows, columns=INDEX_COLUMNS)
        write_parquet_atomic(added, self.index_dir / name)
        if self._index is not None and self._rounds == tuple(p.name for p in before):
            # The index as read, plus this round (its files were just written whole): a round
            # need not read every earlier round again (10^5 runs: 100 rounds, 5,050 reads).
            frame = pd.concat([self._index, added.set_index("run_key", drop=False)])
            self._index = frame[~frame.index.duplicated(keep="last")]
            self._rounds = (*self._rounds, name)
        else:
            self._index = None
        return [row["run_key"] for row in rows]

    def remove_orphans(self) -> int:
        """Delete record files no index round names (what a crash mid-round leaves)."""
        if not self.records_dir.is_dir():
            return 0
        named = self.parts()
        removed = 0
        for path in self.records_dir.rglob("round-*.parquet"):
            if str(path.relative_to(self.folder)) not in named:
                path.unlink(missing_ok=True)
                removed += 1
        if removed:
            for folder in {p for p in self.records_dir.iterdir() if p.is_dir()}:
                fsync_dir(folder)
        return removed

"""The canonical result store: one parquet file of per-step records per run, written atomically.

Layout under a study's output folder:
    <out>/runs/<run_key>.parquet        the records of a finished run (canonical data)
    <out>/runs/<run_key>.json           its meta: run_key, label, status, spec, summary, ...
    <out>/failed/<run_key>.json         a failed run's meta, `error` holding its traceback
                                        (removed when the run later finishes)

A run is finished exactly when its parquet and json exist. Both are written to a temporary
name, flushed to disk and renamed, parquet first, so a crash (even of the machine) never
leaves a half-written result, and a json marker never points at a missing parquet.
Only the driver writes here: workers return their results to it.

The meta JSON (`read_meta`) holds:
    run_key, label, status ("FINISHED" | "FAILED"), spec (every RunSpec field, options as a
    dict), summary (RunResult.summary()), error (traceback or null), wall_time_s, started_at,
    saved_at (unix times), host, pid, version (the package's), rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pandas as pd

from wdrbo_dist import __version__
from wdrbo_dist.run import RunResult, RunSpec


def _fsync_dir(folder: Path) -> None:
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


def write_atomic(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call `write(tmp)` on a temporary file beside `path`, flush it to disk, rename it to `path`.

    A reader sees the old file or the whole new one, never a part, even after a machine crash.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def write_parquet_atomic(frame: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write `frame` to `path` as parquet, atomically."""
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_json_atomic(payload: dict, path: str | os.PathLike[str]) -> None:
    """Write `payload` as JSON to `path`, atomically."""
    text = json.dumps(payload, indent=1, sort_keys=True, default=str)
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))


def spec_to_dict(spec: RunSpec) -> dict[str, Any]:
    """Every RunSpec field, options as a dict (JSON-friendly)."""
    data = dataclasses.asdict(spec)
    data["options"] = spec.options_dict
    return data


def spec_from_dict(data: dict[str, Any]) -> RunSpec:
    """The inverse of `spec_to_dict` (unknown keys are ignored, for older meta files)."""
    names = {f.name for f in dataclasses.fields(RunSpec)}
    kwargs = {k: v for k, v in data.items() if k in names and k != "options"}
    return RunSpec.make(options=data.get("options") or {}, **kwargs)


def result_meta(result: RunResult) -> dict[str, Any]:
    """The meta JSON of a result (see the module docstring)."""
    spec = result.spec
    return {
        "run_key": spec.run_key,
        "label": spec.label,
        "status": result.status,
        "spec": spec_to_dict(spec),
        "summary": result.summary() if result.ok else {"wall_time_s": result.wall_time_s},
        "error": result.error,
        "wall_time_s": result.wall_time_s,
        "started_at": result.started_at,
        "saved_at": time.time(),
        "host": result.host,
        "pid": result.pid,
        "version": __version__,
        "rows": 0 if result.records is None else int(len(result.records)),
    }


class ResultStore:
    """The runs of one study's output folder (see the module docstring for the layout)."""

    def __init__(self, output_dir: str | os.PathLike[str]) -> None:
        self.root = Path(output_dir)
        self.runs_dir = self.root / "runs"
        self.failed_dir = self.root / "failed"

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

        A finished run: parquet, then json, then the failure marker (if any) is removed.
        A failed run: only a failure marker; an earlier finished result of the same key is
        kept (equal keys mean equal records, so it stays valid).
        """
        key = result.spec.run_key
        meta = result_meta(result)
        if result.ok:
            if result.records is None:
                raise ValueError(f"{result.spec.label}: a FINISHED result must carry records")
            write_parquet_atomic(result.records, self.records_path(key))
            write_json_atomic(meta, self.meta_path(key))
            self.failed_path(key).unlink(missing_ok=True)
            return self.meta_path(key)
        write_json_atomic(meta, self.failed_path(key))
        return self.failed_path(key)

    # --- queries -------------------------------------------------------------------------------
    def finished_keys(self) -> set[str]:
        """Run keys with both a parquet and a json: the finished runs."""
        if not self.runs_dir.is_dir():
            return set()
        parquet = {p.stem for p in self.runs_dir.glob("*.parquet") if not p.name.startswith(".")}
        meta = {p.stem for p in self.runs_dir.glob("*.json") if not p.name.startswith(".")}
        return parquet & meta

    def failed_keys(self) -> set[str]:
        """Run keys whose latest attempt failed (and that have not finished since)."""
        if not self.failed_dir.is_dir():
            return set()
        failed = {p.stem for p in self.failed_dir.glob("*.json") if not p.name.startswith(".")}
        return failed - self.finished_keys()

    def is_finished(self, run_key: str) -> bool:
        return self.records_path(run_key).is_file() and self.meta_path(run_key).is_file()

    def read_records(self, run_key: str) -> pd.DataFrame:
        """The per-step records of a finished run."""
        return pd.read_parquet(self.records_path(run_key))

    def read_meta(self, run_key: str) -> dict[str, Any]:
        """The meta of a finished run, or else of its failure."""
        path = self.meta_path(run_key)
        if not path.is_file():
            path = self.failed_path(run_key)
        if not path.is_file():
            raise FileNotFoundError(f"no run {run_key} in {self.root}")
        return json.loads(path.read_text())

    def read_result(self, run_key: str) -> RunResult:
        """A stored run back as a RunResult (what the tracker logs when it catches up)."""
        meta = self.read_meta(run_key)
        records = self.read_records(run_key) if meta["status"] == "FINISHED" else None
        return RunResult(
            spec=spec_from_dict(meta["spec"]),
            status=meta["status"],
            records=records,
            error=meta.get("error"),
            wall_time_s=float(meta.get("wall_time_s", 0.0)),
            started_at=float(meta.get("started_at", 0.0)),
            host=meta.get("host", ""),
            pid=int(meta.get("pid", 0)),
        )

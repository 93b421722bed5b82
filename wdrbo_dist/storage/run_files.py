"""A run as the store writes it: its meta (a JSON object; fields in `store`'s layout comment)
and its records as the store's parquet bytes, encoded where the run ran (`encoded_run`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from wdrbo_dist import __version__
from wdrbo_dist.storage.atomic import parquet_bytes
from wdrbo_dist.run.spec import RunResult, RunSpec


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
    """The meta JSON of a result (its fields: `store`'s layout comment)."""
    spec = result.spec
    return {
        "run_key": spec.run_key,
        "label": spec.label,
        "status": result.status,
        "spec": spec_to_dict(spec),
        "options": result.options,
        "summary": result.summary() if result.ok else {"wall_time_s": result.wall_time_s},
        "error": result.error,
        "wall_time_s": result.wall_time_s,
        "warm_up_s": result.warm_up_s,
        "started_at": result.started_at,
        "saved_at": time.time(),
        "host": result.host,
        "pid": result.pid,
        "version": __version__,
        "rows": 0 if result.records is None else int(len(result.records)),
    }


def encoded_run(run: Callable[[RunSpec], RunResult], spec: RunSpec) -> RunResult:
    """`run(spec)` with its records also encoded as the store's parquet file. The study maps
    this, so the encoding happens where the run ran and the driver, one for all workers, only
    writes the bytes."""
    result = run(spec)
    if result.ok and result.records is not None and result.records_parquet is None:
        result.records_parquet = parquet_bytes(result.records)
        result.summary()  # kept with the result
    return result

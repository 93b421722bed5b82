"""Child runs written to an embedded (sqlite) or PostgreSQL MLflow store many at a time, in one transaction.

MLflow's client spends three ORM transactions on a child run (create, log, end): about 30 ms a
run on sqlite, an hour of the driver's time at 10^5 runs. The driver inserts finished runs' rows
(built by the workers: `StoreRows`) straight into MLflow's tables (the pinned schema, checked
first), through MLflow's SQLAlchemy engine, one transaction per batch: sqlite by INSERT, PostgreSQL
by COPY; a batch sent again is harmless (`ON CONFLICT DO NOTHING`). A run appears as the client would
log it, without the records artifact; tests/tracking read such runs back with MLflow's client.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wdrbo_dist.run.spec import RunResult
from wdrbo_dist.tracking.child_runs import run_metrics, run_tags

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# Each table's rows as tuples in this column order (every column of the table: a row inserted
# directly gets none of the ORM's defaults).
COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("run_uuid", "name", "source_type", "source_name", "entry_point_name", "user_id", "status",
             "start_time", "end_time", "deleted_time", "source_version", "lifecycle_stage", "artifact_uri",
             "experiment_id"),
    "tags": ("key", "value", "run_uuid"),
    "params": ("key", "value", "run_uuid"),
    "metrics": ("key", "value", "timestamp", "step", "is_nan", "run_uuid"),
    "latest_metrics": ("key", "value", "timestamp", "step", "is_nan", "run_uuid"),
}


# The page cache of a sqlite connection that writes (sqlite's default, 2 MB, is a few thousand
# runs' indexes; the rest would be read from disk on each batch).
CACHE_KB = 256 * 1024


@dataclass
class ChildRunRows:
    """The rows of MLflow's tables that make some finished runs' child runs (table -> rows)."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=lambda: {table: [] for table in COLUMNS})
    run_keys: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.run_keys)

    def extend(self, other: "ChildRunRows") -> None:
        for table, rows in other.rows.items():
            self.rows[table] += rows
        self.run_keys += other.run_keys


@dataclass(frozen=True)
class StoreRows:
    """The hook of a study with a database store: a finished run's child-run rows, built where the
    run ran (None for a failed run: the driver logs it through MLflow's client). Plain values."""

    experiment_id: str
    parent_run_id: str
    artifact_root: str
    user: str

    def __call__(self, result: RunResult) -> ChildRunRows | None:
        if not result.ok:
            return None
        run_id = _time_ordered_id()
        spec = result.spec
        start = int((result.started_at or time.time()) * 1000)
        out = ChildRunRows(run_keys=[spec.run_key])
        out.rows["runs"].append((
            run_id, spec.label, "UNKNOWN", "", "", self.user, "FINISHED", start,
            start + int(result.wall_time_s * 1000), None, "", "active", f"{self.artifact_root}/{run_id}/artifacts",
            int(self.experiment_id)))
        tags = {**run_tags(spec, self.parent_run_id, result), "mlflow.user": self.user}
        out.rows["tags"] += [(key, str(value)[:8000], run_id) for key, value in tags.items()]
        used = result.options or spec.options_dict
        given = {**{str(k): str(v) for k, v in used.items()}, "evaluations": str(spec.evaluations),
                 "init_size": str(spec.init_size), "fidelity": spec.fidelity}
        out.rows["params"] += [(k, v[:6000], run_id) for k, v in sorted(given.items())]
        now = int(time.time() * 1000)
        last: dict[str, tuple[int, float]] = {}
        metrics = out.rows["metrics"]
        for key, value, step in run_metrics(result):
            metrics.append(_metric(key, value, step, now, run_id))
            if key not in last or (step, value) > last[key]:
                last[key] = (step, value)
        out.rows["latest_metrics"] += [_metric(key, value, step, now, run_id) for key, (step, value) in last.items()]
        return out


def _time_ordered_id() -> str:
    """A run id as MLflow's (32 hex digits), its first 12 the time in ms: a batch's rows then go
    next to each other in the tables' run-id indexes, not to random pages of a database that, at
    10^5 runs, is far larger than sqlite's cache."""
    return f"{time.time_ns() // 1_000_000:012x}{uuid.uuid4().hex[:20]}"


def _metric(key: str, value: float, step: int, timestamp: int, run_id: str) -> tuple[Any, ...]:
    nan = math.isnan(value)  # MLflow keeps a NaN as 0 with is_nan set
    return (key, 0.0 if nan else value, timestamp, step, nan, run_id)


def _engine(client: "MlflowClient") -> Any:
    """The SQLAlchemy engine of the SqlAlchemyStore behind a sqlite or PostgreSQL URI."""
    return client._tracking_client.store.engine  # noqa: SLF001


class StoreBatch:
    """Finished runs' child-run rows waiting to be written under one study's parent run."""

    def __init__(self, client: "MlflowClient", experiment_id: str, parent_run_id: str) -> None:
        self.client = client
        self.rows_of = StoreRows(experiment_id, parent_run_id,
                                  client.get_experiment(experiment_id).artifact_location.rstrip("/"),
                                  os.environ.get("USER", "unknown"))
        self.pending = ChildRunRows()
        self._checked = False

    def add(self, result: RunResult, rows: ChildRunRows | None = None) -> None:
        """Queue a finished run: `rows` as its hook built them where it ran, else built here."""
        self.pending.extend(rows if rows is not None else self.rows_of(result))  # type: ignore[arg-type]

    def write(self) -> list[str]:
        """Write the pending runs as FINISHED child runs, in one transaction; returns their keys."""
        if not self.pending.runs:
            return []
        pending, self.pending = self.pending, ChildRunRows()  # on an error, the next start logs them from the store
        with _engine(self.client).begin() as connection:  # one transaction, committed on leaving
            if not self._checked:
                _check_columns(connection)
                self._checked = True
            if connection.dialect.name == "sqlite":
                connection.exec_driver_sql(f"PRAGMA cache_size = -{CACHE_KB}")  # this connection's page cache
                _insert_many(connection, pending)
            else:
                _copy_in(connection, pending)
        return pending.run_keys


def _insert_many(connection: Any, pending: ChildRunRows) -> None:
    """sqlite: one prepared INSERT per table, executed for each row (in process, no round trip)."""
    for table, columns in COLUMNS.items():
        if pending.rows[table]:
            connection.exec_driver_sql(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['?'] * len(columns))})"
                " ON CONFLICT DO NOTHING", pending.rows[table])


def _copy_in(connection: Any, pending: ChildRunRows) -> None:
    """PostgreSQL: each table's rows streamed by COPY, a statement per table, not per row (an
    INSERT a row cost the server and the driver 6.2 ms of CPU a run, COPY 1.8:
    benchmarks/runner/store_writes.py, docs/performance.md).
    COPY has no ON CONFLICT: a batch holding a row the database has (sent again) is rolled back
    to its savepoint and sent through temporary tables and INSERT ... ON CONFLICT DO NOTHING."""
    from psycopg.errors import UniqueViolation

    cursor = connection.connection.driver_connection.cursor()  # psycopg's, in SQLAlchemy's transaction
    try:
        with connection.begin_nested():
            for table, columns in COLUMNS.items():
                _copy_rows(cursor, table, columns, pending.rows[table])
    except UniqueViolation:
        for table, columns in COLUMNS.items():
            if pending.rows[table]:
                names, stage = ", ".join(columns), f"wdrbo_stage_{table}"
                cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} (LIKE {table}) ON COMMIT DELETE ROWS")
                _copy_rows(cursor, stage, columns, pending.rows[table])
                cursor.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {stage} ON CONFLICT DO NOTHING")


def _copy_rows(cursor: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    if rows:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _check_columns(connection: Any) -> None:
    """Fail unless each table has exactly the columns the rows fill (another MLflow schema)."""
    from sqlalchemy import inspect

    inspector = inspect(connection)
    for table, columns in COLUMNS.items():
        found = {column["name"] for column in inspector.get_columns(table)}
        if found != set(columns):
            raise RuntimeError(f"MLflow table {table} has columns {sorted(found)}, not {sorted(columns)}")


def child_runs_by_key(client: "MlflowClient", experiment_id: str) -> dict[str, list[tuple[str, str]]]:
    """run_key -> [(run_id, status)] of an experiment's child runs, in one query of the store."""
    from mlflow.store.tracking.dbmodels.models import SqlRun, SqlTag
    from sqlalchemy import select

    children = select(SqlTag.run_uuid).where(SqlTag.key == "role", SqlTag.value == "run")
    query = (select(SqlTag.value, SqlRun.run_uuid, SqlRun.status)
             .join(SqlRun, SqlRun.run_uuid == SqlTag.run_uuid)
             .where(SqlRun.experiment_id == int(experiment_id), SqlRun.lifecycle_stage == "active",
                    SqlTag.key == "run_key", SqlTag.run_uuid.in_(children)))
    index: dict[str, list[tuple[str, str]]] = {}
    with _engine(client).connect() as connection:
        for key, run_id, status in connection.execute(query):
            index.setdefault(key, []).append((run_id, status))
    return index

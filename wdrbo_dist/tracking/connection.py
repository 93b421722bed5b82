"""Reaching an MLflow tracking URI: fail fast before any run, probe a server, bounded retries.

Also the few lookups and limits that the driver's tracker and the report's publisher share:
the client, paging through runs, the study's parent run, saving a UI view, MLflow's batch size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wdrbo_dist.errors import one_line
from wdrbo_dist.errors import redact
from wdrbo_dist.tracking.views import View

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

BATCH = 1000  # MLflow's limit of entities per log_batch call
FINISHED, FAILED, RUNNING, KILLED = "FINISHED", "FAILED", "RUNNING", "KILLED"


class TrackingError(RuntimeError):
    """The tracking store cannot be used; the message says which URI and why, in one line, with
    any `user:password@` of a URL in it shown as `***@`."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


POSTGRES = ("postgresql://", "postgresql+psycopg://")


def tracking_mode(uri: str) -> str:
    """`worker` for a tracking server workers can reach, `driver` for a database the driver
    writes (a sqlite file, a PostgreSQL server)."""
    return "worker" if uri.startswith(("http://", "https://")) else "driver"


# MLflow retries a failed HTTP call 7 times over about 4 minutes by default (rate limits of
# hosted servers). A study's own server that stopped answering would then cost minutes per run;
# the store holds every result anyway, so a few seconds of retries is enough. A user's own
# setting of these variables wins.
MLFLOW_CLIENT_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    # And no "View run ... at ..." line per run on the terminal: a study prints the address of
    # its runs view once, at the end.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # libpq waits for a PostgreSQL host that does not answer as long as TCP does (minutes).
    "PGCONNECT_TIMEOUT": "10",
}


PROBE_INTERVAL_S = 15.0  # how often a driver asks a server that stopped answering whether it is back


def apply_client_settings() -> None:
    for name, value in MLFLOW_CLIENT_SETTINGS.items():
        os.environ.setdefault(name, value)


def server_answers(uri: str, timeout_s: float = 2.0) -> bool:
    """One GET /health, without MLflow's retries: is the tracking server up right now?"""
    import requests

    try:
        return requests.get(f"{uri}/health", timeout=timeout_s).status_code == 200
    except requests.RequestException:
        return False


def mlflow_client(uri: str) -> "MlflowClient":
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def check_tracking_uri(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast, before any run, when the store cannot be reached; create a sqlite db (or
    MLflow's tables in an empty PostgreSQL database).

    Creating them here, in the driver, runs MLflow's schema migrations once instead of racing
    them from several processes.
    """
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackingError(f"tracking_uri {uri}: cannot create folder {db.parent}: {exc.strerror}") from None
        if not os.access(db.parent, os.W_OK):
            raise TrackingError(f"tracking_uri {uri}: folder {db.parent} is not writable")
        try:
            mlflow_client(uri).search_experiments(max_results=1)
        except Exception as exc:  # noqa: BLE001 - any failure here means "unusable store"
            raise TrackingError(f"tracking_uri {uri}: cannot open the sqlite store: {one_line(exc)}") from None
        return
    if uri.startswith(("http://", "https://")):
        import requests

        try:
            response = requests.get(f"{uri}/health", timeout=timeout_s)
        except requests.RequestException as exc:
            raise TrackingError(
                f"tracking_uri {uri}: no MLflow server answers ({type(exc).__name__}); "
                "start one with `mlflow server --host HOST --port PORT` or use tracking_uri: none"
            ) from None
        if response.status_code != 200:
            raise TrackingError(
                f"tracking_uri {uri}: /health answered HTTP {response.status_code}, not an MLflow server?"
            )
        return
    if uri.startswith(POSTGRES):
        _check_postgres(uri, timeout_s)
        return
    raise TrackingError(f"tracking_uri {uri}: unsupported; use sqlite:///PATH, postgresql://HOST:PORT/DB "
                        "or http(s)://HOST:PORT")


# Held while MLflow creates its tables in an empty database: two drivers starting at once on one
# database would otherwise both run the migrations (any constant; the same in every driver).
SCHEMA_LOCK = 0x77647262_6F5F6D6C


def _check_postgres(uri: str, timeout_s: float) -> None:
    """Connect (the password from PGPASSWORD or ~/.pgpass, as libpq reads them), then open MLflow's
    store under an advisory lock, which creates its tables in an empty database once."""
    import psycopg

    apply_client_settings()
    try:
        with psycopg.connect("postgresql://" + uri.split("://", 1)[1], autocommit=True,
                             connect_timeout=max(1, round(timeout_s))) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
            try:
                mlflow_client(uri).search_experiments(max_results=1)
            except Exception as exc:  # noqa: BLE001 - any failure here means "unusable store"
                raise TrackingError(f"tracking_uri {uri}: cannot open the MLflow store: {one_line(exc)}") from None
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
    except psycopg.Error as exc:
        text = one_line(exc)
        hint = "; the password comes from PGPASSWORD or ~/.pgpass" if "password" in text else ""
        raise TrackingError(f"tracking_uri {uri}: cannot connect to PostgreSQL: {text}{hint}") from None


def chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def search_all(client: "MlflowClient", experiment_id: str, filter_string: str) -> list[Any]:
    """Every run of the experiment that matches, page after page (1000 a page)."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def find_parent_run(client: "MlflowClient", experiment_id: str) -> str | None:
    """The study's parent run (tag role=study; the oldest, as the driver reuses it)."""
    found = client.search_runs([experiment_id], filter_string="tags.role = 'study'", max_results=1,
                               order_by=["attributes.start_time ASC"])
    return found[0].info.run_id if found else None


def save_view(client: "MlflowClient", experiment_id: str, view: View) -> None:
    key, value = view.tag()
    client.set_experiment_tag(experiment_id, key, value)

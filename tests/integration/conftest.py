"""Real servers for the integration tests, shared per session: a two-node Ray cluster (token
auth) and an MLflow tracking server (basic auth), both on 127.0.0.1, both stopped by PID in the
finalizers (see tests/support/local_servers.py, which benchmarks/runner/chaos.py shares)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.local_servers import MlflowServer, start_mlflow_server, started_ray_cluster, stop, wait_for


@pytest.fixture(scope="session")
def ray_cluster(_mlflow_process: MlflowServer):
    """The session's cluster, shared by the tests that leave it whole. Its nodes hold the tracking
    server's login in their environment, as jobs/README.md asks of a lab's nodes: the runs there
    (and a submitted job's driver) log with it."""
    with started_ray_cluster(extra_env=_mlflow_process.credentials) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def _mlflow_process():
    """The session's tracking server (basic auth on), started without waiting, so that it boots
    while the Ray cluster does."""
    root = Path(tempfile.mkdtemp(prefix="wdrml", dir="/tmp"))
    server = start_mlflow_server(root)
    try:
        yield server
    finally:
        stop(server.process, grace_s=10)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def _mlflow_ready(_mlflow_process: MlflowServer, ray_cluster) -> MlflowServer:
    wait_for(_mlflow_process.up, 120, "mlflow server", _mlflow_process.log)
    return _mlflow_process


@pytest.fixture
def mlflow_server(_mlflow_ready: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> MlflowServer:
    """The tracking server, ready (every test here uses both servers), its login in this test's
    environment: for the commands it starts and for MlflowClient."""
    _mlflow_ready.log_in(monkeypatch)
    return _mlflow_ready

"""MLflow failing where no run is at stake: one line, and no wait of minutes.

Real servers on 127.0.0.1, each stopped by the PID this file started: an HTTP server that
answers /health but is no MLflow (the tracker's first call fails), and an `mlflow server`
that a study used and that is down when `report` runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.local_servers import free_port, start_mlflow_server, stop, wait_for
from wdrbo_dist.cli import main
from wdrbo_dist.storage.store import ResultStore

CLI = [str(Path(sys.executable).with_name("wdrbo-dist"))]


def study_file(tmp_path: Path, uri: str, name: str = "trk") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "problems": ["newsvendor"], "algorithms": ["random"], "seeds": [1, 2], "evaluations": 8,
        "init_size": 5, "backend": "serial", "workers": 1, "tracking_uri": uri, "output_dir": str(tmp_path / "out"),
    }))
    return path


def test_an_mlflow_error_when_the_tracker_starts_is_one_line_and_no_run_starts(tmp_path, capsys):
    """/health answers 200 (the start-up check passes) but every MLflow call fails."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "health").write_text("OK")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{uri}/health"), 30, "http.server")
        assert main(["run", str(study_file(tmp_path, uri)), "--quiet"]) == 2
    finally:
        stop(server, grace_s=5)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"wdrbo-dist run: error: tracking_uri {uri}: MLflow failed while starting study 'trk' (")
    assert line.endswith("); fix the store or use tracking_uri: none; no run started")
    assert ResultStore(tmp_path / "out").finished_keys() == set()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.integration
def test_report_against_a_tracking_server_that_is_down_says_so_in_seconds(tmp_path):
    root = tmp_path / "server"
    root.mkdir()
    server = start_mlflow_server(root)
    config = study_file(tmp_path, server.uri)
    try:
        wait_for(server.up, 120, "mlflow server", server.log)
        ran = subprocess.run([*CLI, "run", str(config), "--quiet"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, **server.credentials})
        assert ran.returncode == 0, ran.stderr[-2000:]
    finally:
        stop(server.process, grace_s=10)
    assert not server.up()
    started = time.monotonic()
    done = subprocess.run([*CLI, "report", str(config), "--dashboards", str(tmp_path / "dash")],
                          capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if line.startswith("MLflow")] == [
        f"MLflow: no MLflow server answers at {server.uri}; the dashboard is written, nothing logged: "
        "run `report` again once it answers"]
    assert (tmp_path / "dash" / "trk" / "index.html").is_file()
    assert took < 60  # MLflow's own retries took about 4 minutes; the process start and the page take the rest


def test_a_refused_tracking_uri_never_shows_its_password():
    """A URI from elsewhere than a study file (the config refuses credentials in one) is redacted."""
    from wdrbo_dist.tracking.connection import TrackingError, check_tracking_uri

    for uri in (f"http://admin:s3cret@127.0.0.1:{free_port()}", "ftp://admin:s3cret@host/x"):
        with pytest.raises(TrackingError) as refused:
            check_tracking_uri(uri, timeout_s=2)
        assert "s3cret" not in str(refused.value) and "admin:***@" not in str(refused.value)
        assert "://***@" in str(refused.value) and "\n" not in str(refused.value)

"""The test harness's own rules (tests/support/local_servers.py), with a stand-in `ray` program:
a node that times out during start-up is started once more; any other exit is an error."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support import local_servers
from tests.support.local_servers import STARTUP_TIMEOUT, RayCluster, add_worker_node, stop

# Exits with the given message the first `failures` times it is started (counted in a file),
# then prints Ray's start-up line and blocks, as `ray start --block` does.
FAKE_RAY = """#!/bin/sh
count=$(cat "{counter}" 2>/dev/null || echo 0)
echo $((count + 1)) > "{counter}"
if [ "$count" -lt {failures} ]; then
    echo "{message}"
    exit 1
fi
echo "Ray runtime started."
exec sleep 600
"""


def fake_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int, message: str) -> RayCluster:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(FAKE_RAY.format(counter=tmp_path / "starts", failures=failures, message=message))
    ray.chmod(ray.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(local_servers, "BIN", bin_dir)
    return RayCluster("127.0.0.1:1", "http://127.0.0.1:2", dict(os.environ), tmp_path)


def starts(tmp_path: Path) -> int:
    return int((tmp_path / "starts").read_text())


def test_a_node_that_times_out_during_start_up_is_started_once_more(tmp_path, monkeypatch) -> None:
    cluster = fake_cluster(tmp_path, monkeypatch, failures=1, message=f"The current node {STARTUP_TIMEOUT}.")
    process = add_worker_node(cluster, "node2")
    try:
        assert process.poll() is None and starts(tmp_path) == 2
        assert (tmp_path / "node2-retry.log").exists()
    finally:
        stop(process, grace_s=5)


def test_a_node_that_times_out_twice_is_an_error(tmp_path, monkeypatch) -> None:
    cluster = fake_cluster(tmp_path, monkeypatch, failures=2, message=f"The current node {STARTUP_TIMEOUT}.")
    with pytest.raises(RuntimeError, match="node2-retry exited with 1"):
        add_worker_node(cluster, "node2")
    assert starts(tmp_path) == 2


def test_any_other_exit_is_an_error_at_once(tmp_path, monkeypatch) -> None:
    cluster = fake_cluster(tmp_path, monkeypatch, failures=1, message="ConnectionError: GCS refused")
    with pytest.raises(RuntimeError, match="ray node node2 exited with 1"):
        add_worker_node(cluster, "node2")
    assert starts(tmp_path) == 1
    assert all(p.poll() is not None for p in cluster.processes)

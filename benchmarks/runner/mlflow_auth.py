"""What MLflow's basic-auth app costs a tracking server's clients, per request: an `mlflow server`
on 127.0.0.1 (sqlite, one worker) without authentication, with it and every login checked, and
with it and good logins kept for a minute (`auth_cache_ttl_seconds = 60`, docs/reliability.md).
Each is timed over the requests the runner makes most: a search of experiments and a batch of
metrics logged to one run. With the cache on, a wrong password is still refused (checked here).

    .venv/bin/python benchmarks/runner/mlflow_auth.py --requests 50

Printed: ms per request, mean over `--requests` after one untimed request of each kind.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`, the tests' servers

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

SETTINGS = {"none": {"auth": False}, "auth, every login checked": {"auth_cache_s": 0},
            "auth, logins kept 60 s": {"auth_cache_s": 60}}


def timed_requests(uri: str, login: tuple[str, str] | None, count: int) -> dict[str, float]:
    """ms per request of a search and of a metric batch, after one untimed request of each."""
    import requests

    api = f"{uri}/api/2.0/mlflow"
    session = requests.Session()
    session.auth = login
    experiment = session.post(f"{api}/experiments/create", json={"name": f"auth-{time.time_ns()}"}, timeout=30)
    experiment.raise_for_status()
    run = session.post(f"{api}/runs/create", json={"experiment_id": experiment.json()["experiment_id"]}, timeout=30)
    run.raise_for_status()
    run_id = run.json()["run"]["info"]["run_id"]

    def search() -> None:
        session.post(f"{api}/experiments/search", json={"max_results": 1}, timeout=30).raise_for_status()

    def log() -> None:
        metrics = [{"key": "regret", "value": 1.0, "timestamp": 0, "step": step} for step in range(10)]
        session.post(f"{api}/runs/log-batch", json={"run_id": run_id, "metrics": metrics}, timeout=30).raise_for_status()

    out = {}
    for name, request in (("search", search), ("log batch", log)):
        request()
        started = time.perf_counter()
        for _ in range(count):
            request()
        out[name] = (time.perf_counter() - started) / count * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=harness.count, default=50, help="timed requests of each kind per setting")
    args = parser.parse_args()

    import requests

    from tests.support.local_servers import start_mlflow_server, stop, wait_for

    print(f"ms per request, mean of {args.requests}, {time.strftime('%Y-%m-%d')}")
    print(f"{'server':<28}{'search':>10}{'log batch':>12}")
    for label, options in SETTINGS.items():
        root = Path(tempfile.mkdtemp(prefix="wdrauth", dir="/tmp"))
        server = start_mlflow_server(root, **options)
        try:
            wait_for(server.up, 180, "mlflow server", server.log)
            login = ("admin", server.admin_password) if server.admin_password else None
            times = timed_requests(server.uri, login, args.requests)
            if login is not None:  # a kept login is one password: any other is checked, and refused
                wrong = requests.post(f"{server.uri}/api/2.0/mlflow/experiments/search", json={"max_results": 1},
                                      auth=("admin", login[1] + "x"), timeout=30)
                assert wrong.status_code == 401, wrong.status_code
            print(f"{label:<28}{times['search']:>10.1f}{times['log batch']:>12.1f}", flush=True)
        finally:
            stop(server.process, grace_s=10)  # the server this script started
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

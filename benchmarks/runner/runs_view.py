"""How long the MLflow UI takes to show a study's runs view: `mlflow server` on the study's store,
the view `run` prints opened in headless Chromium, and the runs/search request the page makes
for its first page timed by the browser and then sent again (the same body) with `requests`.

Used by scaling.py for its `ui s` column; on its own, for a store that exists:

    .venv/bin/python benchmarks/runner/runs_view.py sqlite:////tmp/x/mlflow.db STUDY_NAME
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: the tests' local servers

SEARCH = "/ajax-api/2.0/mlflow/runs/search"


@dataclass(frozen=True)
class RunsViewTiming:
    page_s: float  # opening the address until the first child run's name is on the page
    browser_call_s: float  # the page's first-page runs/search, by the browser's clock
    replay_s: float  # the same request sent again, median of three
    rows: int  # runs in that first page
    body: str  # the request's JSON body


def runs_view_timing(tracking_uri: str, study: str, scratch: Path, env: dict[str, str] | None = None,
                     workers: int = 2, timeout_s: float = 300.0) -> RunsViewTiming:
    """Serve `tracking_uri` with `mlflow server` (`workers` processes), open the study's runs view
    and time its first page. `env`: the server's extra environment (a database's PGUSER, PGPASSWORD)."""
    import requests
    from mlflow.tracking import MlflowClient

    from tests.support.chromium_cdp import ensure_chromium, load_page
    from tests.support.local_servers import start_mlflow_server, stop, wait_for
    from wdrbo_dist.tracking.views import study_view

    root = scratch / "ui"
    root.mkdir()
    server = start_mlflow_server(root, backend_store_uri=tracking_uri, workers=workers, env=env, auth=False)
    try:
        wait_for(server.up, 180, "mlflow server", server.log)
        experiment = MlflowClient(server.uri).get_experiment_by_name(study)
        address = study_view(study).address(server.uri, experiment.experiment_id)
        ready = "/\\|s\\d+\\b/.test(document.body.innerText)"  # a child run's name, e.g. ackley|gp-ucb|s0
        started = time.monotonic()
        page = load_page(ensure_chromium(), address, root / "chrome", {}, ready, timeout=timeout_s)
        page_s = time.monotonic() - started
        searches = [c for c in page.calls if c.url.endswith(SEARCH) and c.method == "POST" and c.body]
        if not searches:
            raise RuntimeError(f"the page made no runs/search request: {[c.url for c in page.calls]}")
        first = searches[0]
        replays = []
        for _ in range(3):
            started = time.monotonic()
            answer = requests.post(server.uri + SEARCH, data=first.body, timeout=timeout_s,
                                   headers={"Content-Type": "application/json"})
            replays.append(time.monotonic() - started)
            answer.raise_for_status()
        rows = len(answer.json().get("runs", []))
        return RunsViewTiming(page_s, first.seconds or float("nan"), statistics.median(replays), rows, first.body)
    finally:
        stop(server.process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tracking_uri")
    parser.add_argument("study")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runs-view-") as scratch:
        timing = runs_view_timing(args.tracking_uri, args.study, Path(scratch))
    print(f"page {timing.page_s:.1f} s; first page's runs/search {timing.browser_call_s:.2f} s in the browser, "
          f"{timing.replay_s:.2f} s again ({timing.rows} runs); body {json.loads(timing.body)}")


if __name__ == "__main__":
    main()

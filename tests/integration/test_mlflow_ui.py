"""The MLflow UI, as a user meets it: `mlflow ui` on a study's store, opened in headless Chromium
at the addresses `run` and `report` print, with no click in between.

The runs view must show the child runs by name with their algorithm, seed and final regret;
a comparison view must show one problem's aggregate runs (mean curves across seeds) in the
chart view. Chromium is Debian's package, installed when missing (the test fails, never skips).
"""

from __future__ import annotations

import contextlib
import json
import io
import re

import pytest
import yaml

from tests.support.chromium_cdp import ensure_chromium, load_page
from tests.support.local_servers import start_mlflow_ui, stop, wait_for
from wdrbo_dist.cli import main
from wdrbo_dist.tracking.views import MLFLOW_UI_DEFAULT

FAST = {"num_restarts": 2, "raw_samples": 32, "batch_limit": 32}
STUDY = {
    "name": "ui-study", "problems": ["newsvendor", "three-hump-camel"],
    "algorithms": [{"name": "erbo", "options": FAST}, {"name": "gp-ucb", "options": FAST}], "seeds": [1, 2],
    "evaluations": 7, "init_size": 4, "backend": "serial", "workers": 1,
}
BODY = "document.body.innerText"


@pytest.fixture(scope="module")
def tracked_study(tmp_path_factory):
    """A finished, reported study and `mlflow ui` serving its store; yields the printed addresses."""
    root = tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{root}/mlflow.db"
    config = root / "study.yaml"
    config.write_text(yaml.safe_dump(STUDY | {"tracking_uri": uri, "output_dir": str(root / "results")}))
    printed: list[str] = []
    for argv in (["run", str(config), "--quiet"], ["report", str(config), "--dashboards", str(root / "dash")]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        printed += out.getvalue().splitlines()
    ui = start_mlflow_ui(uri, root / "ui.log", workers=1)  # one browser: one server process serves it
    try:
        wait_for(ui.up, 120, "mlflow ui", ui.log)
        addresses = {}
        for line in printed:
            found = re.match(r"MLflow UI(?:, (.+?))?: (http\S+)$", line)
            if found:
                addresses[found.group(1) or "runs"] = found.group(2).replace(MLFLOW_UI_DEFAULT, ui.uri)
        yield addresses, root
    finally:
        stop(ui.process)


def test_run_and_report_print_the_runs_view_and_one_comparison_per_problem(tracked_study) -> None:
    addresses, _ = tracked_study
    assert set(addresses) == {"runs", "the runs", "compare on newsvendor (paper)",
                              "compare on three-hump-camel (paper)"}
    assert addresses["runs"] == addresses["the runs"]  # run and report name the same view
    assert "viewStateShareKey=runs" in addresses["runs"] and "workflowType=machine_learning" in addresses["runs"]


def test_the_runs_view_lists_every_child_run_with_its_columns(tracked_study) -> None:
    addresses, root = tracked_study
    names = [f"{p}|{a}|s{s}" for p in STUDY["problems"] for a in ("erbo", "gp-ucb") for s in (1, 2)]
    ready = " && ".join(f"{BODY}.includes('{n}')" for n in names)
    page = load_page(ensure_chromium(), addresses["runs"], root / "chrome-runs", {"text": BODY}, ready, timeout=90)
    text = page.evaluations["text"]
    assert "Model training" in text and "ui-study: runs" in text  # the ML view, our saved view
    for column in ("algorithm", "problem", "seed", "fidelity", "final_cumulative_regret", "wall_time_s"):
        assert re.search(rf"^{column}$", text, re.MULTILINE), column
    assert "Group: ui-study" in text and "study ui-study" in text  # the children grouped with the parent


def test_a_comparison_view_overlays_the_algorithms_of_one_problem(tracked_study) -> None:
    addresses, root = tracked_study
    legends = [f"agg|newsvendor|{a} (cumulative_regret_mean)" for a in ("erbo", "gp-ucb")]  # one chart's lines
    ready = " && ".join(f"{BODY}.includes('{n}')" for n in legends)
    page = load_page(ensure_chromium(), addresses["compare on newsvendor (paper)"], root / "chrome-compare",
                     {"text": BODY}, ready, timeout=90)
    text = page.evaluations["text"]
    assert "agg|three-hump-camel" not in text and "|s1" not in text  # one problem's aggregates only
    assert "elapsed_s_mean" not in text  # the charts filtered to the mean cumulative regret


def test_the_runs_view_asks_for_its_first_page_in_one_timed_runs_search(tracked_study) -> None:
    """What benchmarks/runner/runs_view.py times: the page's POST to runs/search, its body the
    view's filter, timed by the browser (a figure of docs/performance.md rests on this)."""
    addresses, root = tracked_study
    page = load_page(ensure_chromium(), addresses["runs"], root / "chrome-calls", {}, "/\\|s\\d+\\b/.test(" + BODY + ")",
                     timeout=90)
    searches = [c for c in page.calls if c.url.endswith("/ajax-api/2.0/mlflow/runs/search") and c.method == "POST"]
    assert searches, [c.url for c in page.calls]
    body = json.loads(searches[0].body)
    assert body["filter"] == "tags.role != 'aggregate'" and body["max_results"] >= 8
    assert searches[0].seconds is not None and 0 < searches[0].seconds < 60

"""The README's two pictures, made again from a reported study: its dashboard and its runs in
the MLflow UI, each as headless Chromium (1920x1080) shows it.

    make run                                          # the quick study, reported, in mlflow.db
    .venv/bin/python benchmarks/pages/screenshots.py  # -> docs/img/dashboard.png, docs/img/mlflow_runs.png,
                                                      #    docs/img/mlflow_compare.png

It starts `mlflow ui` on a free port for the study's store and stops it (by PID) at the end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for the tests' helpers

from tests.support.chromium_cdp import ensure_chromium, load_page
from tests.support.local_servers import start_mlflow_ui, stop, wait_for
from wdrbo_dist.analysis.report import study_folder
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.tracking.views import comparison_view, study_view

BODY = "document.body.innerText"
PLOTS_DRAWN = ("document.querySelectorAll('.js-plotly-plot').length > 0 && Array.from("
               "document.querySelectorAll('.js-plotly-plot')).every(d => d.querySelector('svg.main-svg'))")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/quick.yaml")
    parser.add_argument("--problem", default="ackley", help="the problem of the comparison picture")
    parser.add_argument("--dashboards", default="dashboards")
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()

    study = load_study_config(args.config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="wdrbo-screenshots-"))  # browser profiles, the UI's log
    chromium = ensure_chromium()
    page = study_folder(Path(args.dashboards), study.name) / "index.html"
    if not page.is_file():
        print(f"no dashboard at {page}: run `make run` (or `wdrbo-dist report {args.config}`) first", file=sys.stderr)
        return 2
    load_page(chromium, page.resolve().as_uri(), scratch / "dashboard", {}, PLOTS_DRAWN,
              screenshot=out / "dashboard.png")
    print(f"wrote {out / 'dashboard.png'}")

    from mlflow.tracking import MlflowClient

    experiment = MlflowClient(study.tracking_uri).get_experiment_by_name(study.name)
    if experiment is None:
        print(f"no MLflow experiment {study.name!r} in {study.tracking_uri}", file=sys.stderr)
        return 2
    ui = start_mlflow_ui(study.tracking_uri, scratch / "mlflow-ui.log")
    try:
        wait_for(ui.up, 120, "mlflow ui", ui.log)
        runs = study_view(study.name).address(ui.uri, experiment.experiment_id)
        first = f"{study.problems[0]}|{study.algorithms[0]}|s{study.seeds[0]}"
        load_page(chromium, runs, scratch / "runs", {}, f"{BODY}.includes('{first}')", timeout=120,
                  screenshot=out / "mlflow_runs.png")
        print(f"wrote {out / 'mlflow_runs.png'}")
        compare = comparison_view(study.fidelity, args.problem).address(ui.uri, experiment.experiment_id)
        legend = f"agg|{args.problem}|{study.algorithms[0]} (cumulative_regret_mean)"
        load_page(chromium, compare, scratch / "compare", {}, f"{BODY}.includes('{legend}')", timeout=120,
                  screenshot=out / "mlflow_compare.png")
        print(f"wrote {out / 'mlflow_compare.png'}")
    finally:
        stop(ui.process)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

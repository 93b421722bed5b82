"""The runner alone at 10^3 to 10^5 runs: its cost per run, memory, resume, status, report, store.

Each task runs a stand-in for a run (it sleeps --run-ms, 0 by default, and returns the records of
a real 6-evaluation GP-UCB run), so every second measured beyond the sleeping is the runner's: the
driver planning, handing out tasks, storing and compacting results, and logging to MLflow. One
fresh process per row (its peak memory is the driver's); the local backend with 2 workers.

    .venv/bin/python benchmarks/runner/scaling.py                                   # 10^3 and 10^4, all trackings
    .venv/bin/python benchmarks/runner/scaling.py --runs 100000 --tracking none     # the 10^5 row (about 30 min)
    .venv/bin/python benchmarks/runner/scaling.py --runs 10000 100000 --tracking sqlite postgres   # the databases

Trackings: none; sqlite (the embedded store); server (`mlflow server` on sqlite, every worker's
runs sent to it); postgres (a PostgreSQL server started here for the row, fsync on, the study's
store: the driver writes to it in batches).

Columns: runner's cost per run = (study wall - runs x sleep / workers) / runs (the two pool
processes share the two cores with the driver); driver CPU per run = the driver process's CPU
time over the study / runs; resume = the same command again with every run finished; status =
`wdrbo-dist status`; report = the `wdrbo-dist report` command (loading, statistics, figures,
dashboard, and its MLflow artifacts when tracked); driver MB = the driver's peak memory (study,
resume, status), report MB = the report command's; store = the output folder's size and files
(with the database's size for sqlite and postgres); ui = `runs_view.py` for a database: the
first page of the runs view's runs/search sent again (ui s), by the browser (ui browser s), and
the page until a run's name shows (ui page s). Targets at 10^5 runs: cost <= 5 ms per run with
MLflow (postgres: within 1.5x sqlite), report <= 60 s, resume and status <= 30 s, driver memory
<= 2 GB, the runs view's first page <= 5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`, the tests' local servers

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import pandas as pd

from wdrbo_dist.run.spec import RunResult, RunSpec

PROBLEMS = ["ackley", "hartmann", "modified-branin", "newsvendor", "three-hump-camel", "six-hump-camel",
            "toy-general", "portfolio-uniform"]
ALGORITHMS = ["gp-ucb", "erbo"]
EVALUATIONS, INIT_SIZE = 6, 5


# `wdrbo-dist report CONFIG` in a process of its own that prints its peak memory last (VmHWM: a
# child's ru_maxrss starts from its parent's resident memory at the fork).
REPORT = ("import re, sys; from pathlib import Path; from wdrbo_dist.cli import main; code = main(['report', sys.argv[1]]); "
          "print('PEAK_KB', re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1)); sys.exit(code)")


def stand_in(spec: RunSpec, records: bytes, seconds: float) -> RunResult:
    """A run that takes `seconds` and returns `records` (a parquet file, decoded once per
    process, so that a task carries a few bytes): the runner's work without a run's."""
    started = time.time()
    time.sleep(seconds)
    return RunResult(spec=spec, status="FINISHED", records=_decoded(records), options={"beta": 2.0},
                     wall_time_s=time.time() - started, started_at=started)


@functools.lru_cache(maxsize=1)
def _decoded(records: bytes) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(records))


def template_records() -> bytes:
    """The records of a real 6-evaluation GP-UCB run, as the store's parquet file."""
    from wdrbo_dist.storage.atomic import parquet_bytes
    from wdrbo_dist.run.loop import run_one

    spec = RunSpec.make(algorithm="gp-ucb", problem="three-hump-camel", seed=0, evaluations=EVALUATIONS,
                        init_size=INIT_SIZE, options={"raw_samples": 16, "num_restarts": 2})
    return parquet_bytes(run_one(spec, capture_errors=False).records)


def folder_size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def measure(runs: int, tracking: str, run_ms: float, workers: int, scratch: Path,
            ui_view: bool = True) -> dict[str, float | str | None]:
    """One row, in this process: the study, then resume, status and report; for a database
    (sqlite, postgres), the MLflow UI's runs view on it (`runs_view.py`)."""
    from wdrbo_dist.analysis.load import load_study
    from wdrbo_dist.study.config import load_study_config
    from wdrbo_dist.driver.plan import study_status
    from wdrbo_dist.driver.study import run_study

    server, database, env = None, None, {}
    stack = contextlib.ExitStack()
    if tracking == "sqlite":
        uri = f"sqlite:///{scratch}/mlflow.db"
    elif tracking == "postgres":
        from tests.support.postgres import started_postgres

        scratch.chmod(0o711)  # the server's user (not root) reaches its data folder through it
        database = stack.enter_context(started_postgres(durable=True, parent=str(scratch)))
        uri = database.create_database("scaling")
        env = database.env
        os.environ.update(env)  # the driver's and the report's (libpq reads PGUSER, PGPASSWORD)
    elif tracking == "server":
        from tests.support.local_servers import start_mlflow_server, wait_for

        (scratch / "server").mkdir()
        server = start_mlflow_server(scratch / "server", auth=False)  # the runner's cost, not the auth app's
        wait_for(server.up, 120, "mlflow server")
        uri = server.uri
    else:
        uri = "none"
    cells = len(PROBLEMS) * len(ALGORITHMS)
    config = scratch / "study.yaml"
    import yaml

    config.write_text(yaml.safe_dump({
        "name": f"scale-{runs}", "problems": PROBLEMS, "algorithms": ALGORITHMS,
        "seeds": list(range(-(-runs // cells))), "evaluations": EVALUATIONS, "init_size": INIT_SIZE,
        "backend": "local", "workers": workers, "tracking_uri": uri, "output_dir": str(scratch / "out"),
    }))
    try:
        study = load_study_config(config)
        run = functools.partial(stand_in, records=template_records(), seconds=run_ms / 1000)
        start, cpu = time.monotonic(), time.process_time()
        report = run_study(study, run=run)
        wall, cpu = time.monotonic() - start, time.process_time() - cpu
        assert report.exit_code == 0 and len(report.finished) == len(study.runs), report.tracking_warnings
        start = time.monotonic()
        again = run_study(study, run=run)
        resume = time.monotonic() - start
        assert not again.finished
        start = time.monotonic()
        status = study_status(study)
        status_s = time.monotonic() - start
        assert status.totals == (len(study.runs), 0, 0)
        memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the driver's, before the report
        start = time.monotonic()  # the report as a user runs it: a command of its own
        done = subprocess.run([sys.executable, "-c", REPORT, str(config)], capture_output=True, text=True)
        report_s = time.monotonic() - start
        assert done.returncode == 0, done.stderr[-2000:]
        report_mb = float(done.stdout.split("PEAK_KB ")[-1]) / 1024
        assert load_study([study]).counts()["finished"] == len(study.runs)
        size, files = folder_size(scratch / "out")
        if tracking == "sqlite":
            extra = folder_size(scratch / "mlruns") if (scratch / "mlruns").exists() else (0, 0)
            size, files = size + (scratch / "mlflow.db").stat().st_size + extra[0], files + 1 + extra[1]
        elif database is not None:
            size += _database_bytes(database, "scaling")
        ui = None
        if ui_view and tracking in ("sqlite", "postgres"):
            from benchmarks.runner.runs_view import runs_view_timing

            ui = runs_view_timing(uri, study.name, scratch, env=env)
    finally:
        if server is not None:
            from tests.support.local_servers import stop

            stop(server.process)
        stack.close()
    n = len(study.runs)
    return {
        "runs": n, "tracking": tracking, "wall_s": wall, "cost_ms": (wall - n * run_ms / 1000 / workers) / n * 1000,
        "cpu_ms": cpu / n * 1000, "resume_s": resume, "status_s": status_s, "report_s": report_s,
        "memory_mb": memory_mb, "report_mb": report_mb, "store_mb": size / 2**20, "files": files,
        "ui_s": ui.replay_s if ui else None, "ui_browser_s": ui.browser_call_s if ui else None,
        "ui_page_s": ui.page_s if ui else None, "ui_rows": ui.rows if ui else None, "ui_body": ui.body if ui else None,
    }


def _database_bytes(database, name: str) -> int:
    """The PostgreSQL database's size on disk (its tables, indexes and their free space)."""
    import psycopg

    with psycopg.connect(host=database.host, port=database.port, user=database.user, password=database.password,
                         dbname=name) as conn:
        return int(conn.execute("SELECT pg_database_size(%s)", (name,)).fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=harness.count, nargs="+", default=[1000, 10000])
    parser.add_argument("--tracking", nargs="+", choices=["none", "sqlite", "server", "postgres"],
                        default=["none", "sqlite", "server", "postgres"])
    parser.add_argument("--no-ui", action="store_true", help="skip the MLflow UI's runs view (the ui columns)")
    parser.add_argument("--run-ms", type=float, default=0.0, help="how long the stand-in run sleeps")
    harness.add_workers(parser)
    parser.add_argument("--scratch", default=None,
                        help="the folder that holds each row's output folder and database (default: the system's temp)")
    parser.add_argument("--one", nargs=2, metavar=("RUNS", "TRACKING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if args.one:
        with tempfile.TemporaryDirectory(prefix="scaling-", dir=args.scratch) as scratch:
            row = measure(int(args.one[0]), args.one[1], args.run_ms, args.workers, Path(scratch), not args.no_ui)
        print("ROW " + json.dumps(row), flush=True)
        return
    if args.scratch and not os.access(args.scratch, os.W_OK | os.X_OK):
        parser.error(f"--scratch: {args.scratch} is not a folder this user can write")
    print(f"stand-in runs of {args.run_ms:g} ms, {EVALUATIONS} evaluations; local backend, {args.workers} workers; "
          f"load before: {os.getloadavg()[0]:.2f}; scratch {args.scratch or tempfile.gettempdir()}; {time.strftime('%Y-%m-%d')}", flush=True)
    header = (f"{'runs':>7} {'tracking':<8} {'study s':>8} {'cost ms/run':>11} {'driver CPU ms/run':>17} "
              f"{'resume s':>8} {'status s':>8} {'report s':>8} {'driver MB':>9} {'report MB':>9} {'store MB':>8} "
              f"{'files':>7} {'ui s':>6} {'ui browser s':>12} {'ui page s':>9}")
    print(header, flush=True)
    bodies: list[str] = []
    for runs in args.runs:
        for tracking in args.tracking:
            done = subprocess.run([sys.executable, __file__, "--one", str(runs), tracking, "--run-ms", str(args.run_ms),
                                   "--workers", str(args.workers), *(["--no-ui"] if args.no_ui else []),
                                   *(["--scratch", args.scratch] if args.scratch else [])], capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("ROW ")]
            if done.returncode != 0 or not lines:
                print(f"{runs:>7} {tracking:<8} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}", flush=True)
                continue
            r = json.loads(lines[-1][4:])
            print(f"{r['runs']:>7,} {tracking:<8} {r['wall_s']:>8.1f} {r['cost_ms']:>11.1f} {r['cpu_ms']:>17.1f} "
                  f"{r['resume_s']:>8.1f} {r['status_s']:>8.1f} {r['report_s']:>8.1f} {r['memory_mb']:>9.0f} "
                  f"{r['report_mb']:>9.0f} {r['store_mb']:>8.1f} {r['files']:>7,} {_seconds(r['ui_s']):>6} "
                  f"{_seconds(r['ui_browser_s']):>12} {_seconds(r['ui_page_s']):>9}", flush=True)
            if r["ui_body"] and r["ui_body"] not in bodies:
                bodies.append(r["ui_body"])
                print(f"{'':>17}the runs view's first page: POST runs/search {r['ui_body']} ({r['ui_rows']} runs)", flush=True)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()

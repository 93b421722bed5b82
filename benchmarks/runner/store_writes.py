"""What writing finished runs into an MLflow database costs, per run: `StoreBatch.write` alone, in
batches of 500 runs (as the driver writes them) of a real 6-evaluation GP-UCB run's child-run rows
(60 metric rows, 16 tags, 10 params), into embedded sqlite and a PostgreSQL server started here
(fsync on), on an idle machine.

    .venv/bin/python benchmarks/runner/store_writes.py --runs 20000

Printed per store: the write's wall time, the driver's CPU and the database server's CPU (its
processes' user + system time), each in ms per run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`, the tests' servers

from benchmarks import harness  # noqa: F401 - first: one thread, before NumPy or torch is imported
from benchmarks.runner.scaling import _decoded, template_records

BATCH = 500


def server_cpu_s(marker: bytes) -> float:
    """User + system seconds of the processes whose command line holds `marker`, with their
    ended children's (a server's finished backends)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker not in (entry / "cmdline").read_bytes():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def measure(store: str, runs: int) -> tuple[float, float, float]:
    """(wall, driver CPU, server CPU) in ms per run of writing `runs` runs into `store`."""
    from mlflow.tracking import MlflowClient

    from tests.support.postgres import started_postgres
    from wdrbo_dist.run.spec import RunResult, RunSpec
    from wdrbo_dist.tracking.batch_rows import StoreBatch

    records = _decoded(template_records())
    with contextlib.ExitStack() as stack:
        if store == "postgres":
            database = stack.enter_context(started_postgres(durable=True))
            uri = database.create_database("writes")
            os.environ.update(database.env)
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="store-writes-"))
            uri = f"sqlite:///{folder}/mlflow.db"
        client = MlflowClient(uri)
        experiment = client.create_experiment("writes")
        batch = StoreBatch(client, experiment, client.create_run(experiment).info.run_id)
        wall = cpu = 0.0
        server = server_cpu_s(b"postgres")
        for first in range(0, runs, BATCH):
            for seed in range(first, min(first + BATCH, runs)):
                spec = RunSpec.make(algorithm="gp-ucb", problem="ackley", seed=seed, evaluations=6, init_size=5)
                batch.add(RunResult(spec=spec, status="FINISHED", records=records, options={"beta": 2.0},
                                    wall_time_s=0.1, started_at=time.time()))
            started, cpu_started = time.monotonic(), time.process_time()
            batch.write()
            wall += time.monotonic() - started
            cpu += time.process_time() - cpu_started
        server = server_cpu_s(b"postgres") - server if store == "postgres" else 0.0
    return wall / runs * 1000, cpu / runs * 1000, server / runs * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--stores", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    args = parser.parse_args()
    print(f"{args.runs:,} runs in batches of {BATCH}; load before {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d')}")
    print(f"{'store':<9} {'wall ms/run':>11} {'driver CPU ms/run':>17} {'server CPU ms/run':>17}")
    for store in args.stores:
        wall, cpu, server = measure(store, args.runs)
        print(f"{store:<9} {wall:>11.2f} {cpu:>17.2f} {server:>17.2f}", flush=True)


if __name__ == "__main__":
    main()

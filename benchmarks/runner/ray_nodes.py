"""Runs per second on one local Ray node against three, and the driver's CPU per run.

A Ray cluster of 1 CPU nodes on 127.0.0.1 (token authentication on), the study runner's driver
joined to it with `--address`, and the stand-in run of `scaling.py` sleeping a fixed time, so
that the nodes' capacity, not this machine's two cores, bounds the runs: with N nodes and runs
of S seconds the ideal is N / S runs per second. Measured between the first result and the last
(so Ray's connection and the workers' start are left out): runs per second, the share of the
ideal, and the driver process's CPU per run (Ray's driver threads included). One driver can
keep busy about `run length / driver CPU per run` workers, the figure the README gives.

    .venv/bin/python benchmarks/runner/ray_nodes.py                           # 1 and 3 nodes, 0.2-s runs
    .venv/bin/python benchmarks/runner/ray_nodes.py --nodes 1 3 --run-ms 100 --runs 300
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`, the tests' local servers

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import yaml

from benchmarks.runner.scaling import ALGORITHMS, EVALUATIONS, INIT_SIZE, PROBLEMS, stand_in, template_records


class Clock:
    """The progress watcher the driver calls on each result: wall and CPU at the first and the last."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def __call__(self, tasks):  # run_study's `progress`: a watcher for these tasks
        return self

    def update(self, outcome) -> None:
        now = (time.monotonic(), time.process_time())
        if self.marks:
            self.marks[1:] = [now]
        else:
            self.marks.append(now)

    def close(self) -> None:
        pass


def measure(nodes: int, address: str, runs: int, run_ms: float, scratch: Path) -> dict[str, float]:
    """One row, in this process: the driver joined to the cluster at `address` (a warm-up study
    first, which starts every node's worker), then the measured study."""
    from wdrbo_dist.study.config import load_study_config
    from wdrbo_dist.driver.study import run_study

    run = functools.partial(stand_in, records=template_records(), seconds=run_ms / 1000)
    results: dict[str, float] = {}
    for name, count in (("warm-up", 2 * nodes), ("measured", runs)):
        config = scratch / f"{nodes}-{name}.yaml"
        config.write_text(yaml.safe_dump({
            "name": f"nodes-{nodes}-{name}", "problems": PROBLEMS, "algorithms": ALGORITHMS,
            "seeds": list(range(-(-count // (len(PROBLEMS) * len(ALGORITHMS))))), "evaluations": EVALUATIONS,
            "init_size": INIT_SIZE, "backend": "ray", "workers": nodes, "tracking_uri": "none",
            "output_dir": str(scratch / f"out-{nodes}-{name}"),
        }))
        study = load_study_config(config)
        clock = Clock()
        report = run_study(study, address=address, progress=clock, run=run)
        assert report.exit_code == 0 and len(report.finished) == len(study.runs), report.exit_code
        (wall0, cpu0), (wall1, cpu1) = clock.marks
        results = {"runs": len(study.runs), "per_s": (len(study.runs) - 1) / (wall1 - wall0),
                   "cpu_ms": (cpu1 - cpu0) / (len(study.runs) - 1) * 1000}
    ideal = nodes / (run_ms / 1000)
    return {**results, "nodes": nodes, "ideal": ideal, "share": results["per_s"] / ideal}


def row(nodes: int, args: argparse.Namespace, scratch: Path) -> dict[str, float]:
    """Start a cluster of `nodes`, measure in a driver process of its own (the cluster's
    environment: its token), stop the cluster."""
    from tests.support.local_servers import started_ray_cluster

    with started_ray_cluster("wdb", nodes=nodes, extra_env={"PYTHONPATH": str(harness.ROOT)}) as cluster:
        done = subprocess.run([sys.executable, __file__, "--one", str(nodes), cluster.gcs_address, str(scratch),
                               "--runs", str(args.runs), "--run-ms", str(args.run_ms)],
                              env=cluster.env, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("ROW ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{nodes} nodes: the driver failed\n{(done.stderr or done.stdout)[-3000:]}")
    return json.loads(lines[-1][4:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=harness.count, nargs="+", default=[1, 3])
    parser.add_argument("--runs", type=harness.count, default=240)
    parser.add_argument("--run-ms", type=float, default=200.0)
    parser.add_argument("--one", nargs=3, metavar=("NODES", "ADDRESS", "SCRATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 2 or args.run_ms <= 0:
        parser.error("--runs >= 2, --run-ms > 0")
    if args.one:
        nodes, address, scratch = args.one
        print("ROW " + json.dumps(measure(int(nodes), address, args.runs, args.run_ms, Path(scratch))), flush=True)
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    print(f"stand-in runs of {args.run_ms:g} ms, {args.runs} runs, 1-CPU Ray nodes on 127.0.0.1; "
          f"load before: {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d')}", flush=True)
    print(f"{'nodes':>5} {'runs/s':>7} {'ideal':>6} {'share':>6} {'driver CPU ms/run':>17} {'workers fed at this run length':>31}")
    with tempfile.TemporaryDirectory(prefix="ray-nodes-") as scratch:
        for nodes in args.nodes:
            r = row(nodes, args, Path(scratch))
            print(f"{nodes:>5} {r['per_s']:>7.2f} {r['ideal']:>6.1f} {r['share']:>6.0%} {r['cpu_ms']:>17.1f} "
                  f"{args.run_ms / r['cpu_ms']:>31.0f}", flush=True)


if __name__ == "__main__":
    main()

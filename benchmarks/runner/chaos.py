"""One study under repeated random faults, then resumed: is every run there exactly once?

On a two-node Ray cluster (1 CPU each) and an `mlflow server`, all on 127.0.0.1 and started
here, the same study runs twice through the command line (`wdrbo-dist run --address ...`),
after a six-run warm-up that starts the nodes' workers: once without faults, then under a fault
every `--interval` seconds (uniform within +-50 %), each drawn from:

- `worker`: SIGKILL a Ray worker running one of the runs (Ray retries it);
- `node`: SIGKILL the second node's raylet (the node is lost; a new node joins 5 s later);
- `driver`: SIGKILL the driver (it is started again at once, as a job wrapper would);
- `tracking`: stop the MLflow server (it comes back 10 s later on the same port and database).

A driver that ends otherwise than with exit 0 (killed; 69: runs lost, the cluster gone; 2: the
tracking server down at its start) is started again at once, as a job wrapper would. The study
is done, and its wall time ends, when a driver exits 0 (every run is in the store); what a fault
took down is then brought back and the driver started once more, untimed in both passes (the
resume, which also catches MLflow up). Printed: runs expected / finished / lost / duplicated (a
run key with more than one FINISHED MLflow child, or a FAILED record) and the wall time against
the fault-free pass. Targets: 0 lost, 0 duplicated, <= 1.5x the time.

    .venv/bin/python benchmarks/runner/chaos.py                    # 24 runs, a fault every ~12 s
    .venv/bin/python benchmarks/runner/chaos.py --seeds 12 --interval 20 --faults 6
    .venv/bin/python benchmarks/runner/chaos.py --kinds tracking --faults 1   # the tracking server alone
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`, the tests' local servers

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import yaml

from tests.support.local_servers import (
    add_worker_node, node_raylet, processes, start_mlflow_server, started_ray_cluster, stop, wait_for,
)

CLI = str(Path(sys.executable).with_name("wdrbo-dist"))
FAULTS = ("worker", "node", "driver", "tracking")
FAST = {"raw_samples": 32, "num_restarts": 2}


def write_study(path: Path, name: str, uri: str, seeds: int, evaluations: int) -> Path:
    path.write_text(yaml.safe_dump({
        "name": name, "problems": ["three-hump-camel", "newsvendor", "ackley"],
        "algorithms": [{"name": a, "options": FAST} for a in ("erbo", "gp-ucb")],
        "seeds": list(range(seeds)), "evaluations": evaluations, "init_size": 5, "backend": "ray",
        "workers": 2, "tracking_uri": uri, "output_dir": str(path.parent / name),
    }))
    return path


class Driver:
    """`wdrbo-dist run CONFIG --address ...`, started again whenever it ends or is killed."""

    def __init__(self, config: Path, address: str, env: dict[str, str], log: Path) -> None:
        self.command = [CLI, "run", str(config), "--address", address, "--quiet"]
        self.env, self.log = env, log.open("a")
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.exits: list[int] = []
        self.origin = time.monotonic()

    def start(self) -> None:
        self.starts += 1
        self.log.write(f"\n--- driver start {self.starts} at {time.monotonic() - self.origin:.1f} s\n")
        self.log.flush()
        self.process = subprocess.Popen(self.command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def poll(self) -> int | None:
        code = self.process.poll() if self.process else None
        if code is not None and self.process is not None:
            self.exits.append(code)
            self.process = None
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()  # the driver this script started
            self.process.wait()
            self.exits.append(-9)
            self.process = None


def ray_workers_running_runs(cluster) -> list[int]:
    table = processes()
    found = []
    for pid, (_, cmdline, _) in table.items():
        ancestor = pid
        while ancestor in table and ancestor not in cluster.pids and ancestor > 1:
            ancestor = table[ancestor][0]
        if cmdline.startswith("ray::run ") and ancestor in cluster.pids:
            found.append(pid)
    return found


def run_study(config: Path, cluster, server, faults: bool, args, log: Path):
    """Run `config` to completion (under faults if asked); returns (wall s, faults done, driver,
    the tracking server now running).

    The study is done when a driver exits 0 (every run is in the store): faults stop there and
    the wall time ends there. What a fault took down is then brought back, and the driver is
    started once more, untimed as in the fault-free pass: the resume, where MLflow catches up.
    """
    rng = random.Random(args.rng)
    driver = Driver(config, cluster.gcs_address, cluster.env, log)
    done: list[str] = []
    restarts: list[tuple[float, str]] = []  # (when, what): a node or the server to bring back
    nodes = 2

    def bring_back(until: float) -> None:
        nonlocal server, nodes
        for when, what in sorted(r for r in restarts if r[0] <= until):
            time.sleep(max(0.0, when - time.monotonic()))
            restarts.remove((when, what))
            if what == "tracking":
                server = start_mlflow_server(server.log.parent, port=int(server.uri.rsplit(":", 1)[1]), auth=False)
                wait_for(server.up, 120, "mlflow server")
            else:
                nodes += 1
                add_worker_node(cluster, f"node{nodes}")

    started = time.monotonic()
    driver.start()
    next_fault = started + rng.uniform(0.5, 1.5) * args.interval
    while True:
        now = time.monotonic()
        bring_back(now)
        code = driver.poll()
        if code == 0:
            break
        if code is not None or driver.process is None:
            driver.start()
        if faults and len(done) < args.faults and now >= next_fault:
            fault = rng.choice(args.kinds)
            if fault == "worker" and (pids := ray_workers_running_runs(cluster)):
                os.kill(rng.choice(pids), signal.SIGKILL)
            elif fault == "node" and (pid := node_raylet(cluster, f"node{nodes}" if nodes > 2 else "node2")):
                os.kill(pid, signal.SIGKILL)
                restarts.append((now + 5.0, "node"))
            elif fault == "driver":
                driver.kill()
            elif fault == "tracking" and not any(w == "tracking" for _, w in restarts):
                stop(server.process, grace_s=5)
                restarts.append((now + 10.0, "tracking"))
            else:
                fault = f"({fault}: nothing to hit)"
            done.append(fault)
            driver.log.write(f"\n--- fault {fault} at {now - started:.1f} s\n")
            driver.log.flush()
            next_fault = now + rng.uniform(0.5, 1.5) * args.interval
        time.sleep(0.2)
    wall = time.monotonic() - started
    bring_back(math.inf)
    driver.start()  # the resume: nothing left to run, MLflow catches up
    while driver.poll() is None:
        time.sleep(0.2)
    return wall, done, driver, server


def count(config: Path, uri: str) -> dict[str, int]:
    from mlflow.tracking import MlflowClient

    from wdrbo_dist.study.config import load_study_config
    from wdrbo_dist.storage.store import ResultStore

    study = load_study_config(config)
    keys = {r.run_key for r in study.runs}
    store = ResultStore(study.output_dir)
    finished = store.finished_keys() & keys
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study.name)
    children: dict[str, int] = {}
    token = None
    while True:
        page = client.search_runs([experiment.experiment_id], "tags.role = 'run'", max_results=1000, page_token=token)
        for run in page:
            if run.info.status == "FINISHED":
                children[run.data.tags["run_key"]] = children.get(run.data.tags["run_key"], 0) + 1
        token = page.token
        if not token:
            break
    duplicated = {k for k, n in children.items() if n > 1} | (store.failed_keys() & keys)
    return {"expected": len(keys), "finished": len(finished), "lost": len(keys - finished),
            "duplicated": len(duplicated), "mlflow_finished": sum(1 for k in keys if children.get(k) == 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_seeds(parser, 4, help="seeds per cell (3 problems x 2 algorithms)")
    harness.add_evaluations(parser, 14)
    parser.add_argument("--interval", type=float, default=12.0, help="mean seconds between faults")
    parser.add_argument("--faults", type=int, default=8, help="faults injected at most")
    parser.add_argument("--rng", type=int, default=0, help="seed of the fault schedule")
    parser.add_argument("--kinds", nargs="+", choices=FAULTS, default=list(FAULTS), help="the faults to draw from")
    args = parser.parse_args()
    # SIGTERM (a timeout, a kill) unwinds like Ctrl-C, so the servers started here are stopped.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    work = Path(tempfile.mkdtemp(prefix="chaos-", dir="/tmp"))
    (work / "server").mkdir()
    server = start_mlflow_server(work / "server", auth=False)
    try:
        with started_ray_cluster("wdc") as cluster:
            wait_for(server.up, 120, "mlflow server", server.log)
            results = {}
            # A first pass starts every node's worker processes (torch and the package imported),
            # so that the fault-free pass does not pay a cost that the faulted one would not.
            for name, faults in (("warm-up", False), ("clean", False), ("chaos", True)):
                seeds = 1 if name == "warm-up" else args.seeds
                config = write_study(work / f"{name}.yaml", f"chaos-{name}", server.uri, seeds, args.evaluations)
                wall, done, driver, server = run_study(config, cluster, server, faults, args, work / f"{name}.log")
                results[name] = (wall, done, driver, count(config, server.uri))
    finally:
        stop(server.process, grace_s=10)
    clean_wall = results["clean"][0]
    wall, done, driver, counts = results["chaos"]
    print(f"study: 3 problems x 2 algorithms x {args.seeds} seeds, {args.evaluations} evaluations, "
          f"2 nodes x 1 CPU; logs in {work}")
    print(f"faults ({len(done)}): {', '.join(done)}")
    print(f"driver starts {driver.starts}, exits {driver.exits}")
    print(f"runs expected {counts['expected']}, finished {counts['finished']}, lost {counts['lost']}, "
          f"duplicated {counts['duplicated']}; one FINISHED MLflow child: {counts['mlflow_finished']}")
    print(f"wall time: fault-free {clean_wall:.1f} s, under faults {wall:.1f} s, ratio {wall / clean_wall:.2f} "
          f"(target <= 1.5)")
    clean_counts = results["clean"][3]
    assert clean_counts["lost"] == 0 and clean_counts["duplicated"] == 0, clean_counts


if __name__ == "__main__":
    main()

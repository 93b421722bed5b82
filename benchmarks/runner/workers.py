"""How well the study runner uses the machine: one small study on 1 and 2 workers, local and ray.

Prints, per backend and worker count: study wall time, runs per hour, speed-up and parallel
efficiency against one worker of the same backend, and the backend's overhead per task (time
between handing a run to the backend and having its result back in the driver, minus the
run's own wall time: scheduling, process start, argument and result transfer). Backend start
(process pool spawn, `ray.init`) is reported apart.

Targets (issue 4): 2 workers >= 1.8x one worker; Ray's overhead <= 2 % of study time.

    .venv/bin/python benchmarks/runner/workers.py                 # 24 runs of 100 evaluations (~9 min)
    .venv/bin/python benchmarks/runner/workers.py --evaluations 20 --backends ray

The runs are full-length (5-15 s each), 24 of them: each new worker process's first run pays
its imports (torch and the package, ~1.5 s), a fixed cost per worker that is 3 % of a 12-run,
50-second study and vanishes in a real one; with runs of a second or two it would dominate.

Measure on an otherwise idle machine: a second user of the two cores halves every figure.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.driver.plan import make_tasks
from wdrbo_dist.driver.study import run_captured

# Before the Ray backend imports ray (when it starts, in `map_tasks`):
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
if "RAY_AUTH_MODE" not in os.environ:  # a private token: nothing written to ~/.ray
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))


def study(evaluations: int, seeds: int, out: Path):
    return parse_study_config({
        "name": "scaling", "problems": ["three-hump-camel", "newsvendor", "toy-general"],
        "algorithms": ["erbo", "wdrbo"], "seeds": list(range(100, 100 + seeds)),
        "evaluations": evaluations, "init_size": 5, "tracking_uri": "none", "output_dir": str(out),
    })


def measure(backend: str, workers: int, evaluations: int, seeds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        spec = study(evaluations, seeds, Path(tmp))
        tasks = make_tasks(spec, spec.runs)
        start = time.monotonic()
        first_submit = None
        outcomes = []
        for outcome in map_tasks(tasks, backend, workers, run=run_captured):
            first_submit = outcome.submitted_at if first_submit is None else min(first_submit, outcome.submitted_at)
            outcomes.append(outcome)
        wall = time.monotonic() - start
    failed = [o for o in outcomes if not o.result.ok]
    if failed:
        raise SystemExit(f"{backend}/{workers}: {len(failed)} runs failed: {failed[0].result.error}")
    run_time = sum(o.result.wall_time_s for o in outcomes)
    overhead = [o.overhead_s for o in outcomes]
    return {
        "wall_s": wall,
        "startup_s": (first_submit or start) - start,
        "runs": len(outcomes),
        "runs_per_hour": 3600 * len(outcomes) / wall,
        "run_time_s": run_time,
        "run_mean_s": run_time / len(outcomes),
        "overhead_mean_s": statistics.mean(overhead),
        "overhead_median_s": statistics.median(overhead),
        # Overhead as a share of the study (after start-up): summed over tasks, spread over the
        # workers; "steady" counts every task at the median (no process cold starts).
        "overhead_share": sum(overhead) / workers / (wall - ((first_submit or start) - start)),
        "steady_share": statistics.median(overhead) * len(overhead) / workers / (wall - ((first_submit or start) - start)),
    }


def steady(r: dict[str, float]) -> float:
    return r["wall_s"] - r["startup_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_evaluations(parser)
    harness.add_seeds(parser, 4)
    parser.add_argument("--backends", default="local,ray")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
          " (anything above ~0.2 makes the figures pessimistic)", flush=True)
    results: dict[tuple[str, int], dict[str, float]] = {}
    for backend in args.backends.split(","):
        for workers in (1, 2):
            print(f"running {backend} with {workers} worker(s) ...", flush=True)
            results[(backend, workers)] = measure(backend, workers, args.evaluations, args.seeds)
    print()
    print("wall: the whole study, backend start included; speed-up and efficiency: on wall minus start;")
    print("run s: mean wall time of one run (if it grows with the workers, the cores are not free)")
    print("overhead per task: mean (first tasks of each process pay its imports) and median (steady state)")
    print(f"{'backend':<8}{'workers':>8}{'wall s':>9}{'start s':>9}{'runs/h':>9}{'speed-up':>10}"
          f"{'effic.':>8}{'run s':>7}{'ovh mean s':>12}{'ovh med s':>11}{'ovh share':>11}{'steady':>8}")
    for (backend, workers), r in results.items():
        speedup = steady(results[(backend, 1)]) / steady(r)
        print(f"{backend:<8}{workers:>8}{r['wall_s']:>9.1f}{r['startup_s']:>9.1f}{r['runs_per_hour']:>9.0f}"
              f"{speedup:>9.2f}x{speedup / workers:>8.2f}{r['run_mean_s']:>7.1f}{r['overhead_mean_s']:>12.3f}"
              f"{r['overhead_median_s']:>11.3f}{r['overhead_share']:>10.1%}{r['steady_share']:>8.2%}")
    print()
    print(f"{results[next(iter(results))]['runs']} runs of {args.evaluations} evaluations per row, {os.cpu_count()} CPUs")
    for backend in args.backends.split(","):
        speedup = steady(results[(backend, 1)]) / steady(results[(backend, 2)])
        print(f"target {backend}: 2 workers >= 1.8x one worker: {speedup:.2f}x {'OK' if speedup >= 1.8 else 'MISSED'}")
    if ("ray", 2) in results:
        r = results[("ray", 2)]
        share = r["overhead_share"]
        print(f"target ray: overhead <= 2 % of study time: {share:.1%} {'OK' if share <= 0.02 else 'MISSED'}; "
              f"steady state (median {r['overhead_median_s']:.3f} s per task) {r['steady_share']:.2%}; "
              f"ray.init {r['startup_s']:.1f} s not included")


if __name__ == "__main__":
    main()

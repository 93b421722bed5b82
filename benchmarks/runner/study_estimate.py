"""How long would the full paper study take on this machine? Run one seed of every cell, scale up.

Runs one seed of every algorithm x problem cell of a study file (default
configs/paper_data_driven.yaml: 8 x 8 cells, 15 seeds, 100 evaluations) with the study's own
settings, then extrapolates: every cell's seeds are assumed to take as long as the measured
one, and the full set of runs is scheduled longest-first onto the workers (the runner's own
policy), whose makespan is the estimate. Algorithms not yet registered are listed and left out.

    .venv/bin/python benchmarks/runner/study_estimate.py                      # the real thing (long)
    .venv/bin/python benchmarks/runner/study_estimate.py --evaluations 30     # a quick look: per-step
                                                                              # time scaled to 100 (low)
Target (issue 15): the full configs/paper_data_driven.yaml in <= 1.5 hours on 2 workers. The
row "x ERBO, mean" is each algorithm's time relative to ERBO's, averaged over the problems: the
`relative_cost` that orders a study's runs longest-first.
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np
import yaml

from wdrbo_dist.cli.progress import Progress
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.driver.study import run_study


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def makespan(durations: list[float], workers: int) -> float:
    """Longest-first list scheduling of `durations` onto `workers` identical workers."""
    loads = [0.0] * workers
    for duration in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + duration)
    return max(loads)


def extrapolate(result, records, evaluations: int) -> float:
    """A run's wall time at `evaluations`: its own time plus the missing BO steps, each costing
    what a least-squares line through its measured BO steps' times predicts (steps get dearer
    as the data grows; a flat average would underestimate)."""
    bo = records[~records["is_initial"].astype(bool)]
    missing = range(len(records) + 1, evaluations + 1)
    if not len(missing):
        return result.wall_time_s
    steps, times = bo["step"].to_numpy(float), bo["time_step_s"].to_numpy(float)
    if len(bo) >= 3:
        slope, intercept = np.polyfit(steps, times, 1)
        slope = max(slope, 0.0)
        if slope == 0.0:
            intercept = times.mean()
    else:
        slope, intercept = 0.0, float(times.mean()) if len(times) else 0.0
    extra = sum(max(intercept + slope * t, 0.0) for t in missing)
    return result.wall_time_s + extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", default=str(harness.ROOT / "configs" / "paper_data_driven.yaml"))
    harness.add_workers(parser, help="workers for the measurement and the estimate")
    parser.add_argument("--backend", default="local")
    harness.add_evaluations(parser, None, help="measure shorter runs and scale per BO step (underestimates)")
    args = parser.parse_args()

    from wdrbo_dist.acquisition.registry import ALGORITHMS

    data = yaml.safe_load(Path(args.config).read_text())
    names = [a if isinstance(a, str) else a["name"] for a in data["algorithms"]]
    missing = [n for n in names if n not in ALGORITHMS]
    full = parse_study_config({**data, "algorithms": [a for a, n in zip(data["algorithms"], names) if n in ALGORITHMS]})
    with tempfile.TemporaryDirectory() as tmp:
        probe = parse_study_config({
            **data,
            "name": f"{full.name}-estimate",
            "algorithms": [a for a, n in zip(data["algorithms"], names) if n in ALGORITHMS],
            "seeds": full.seeds[:1],
            "evaluations": args.evaluations or full.evaluations,
            "tracking_uri": "none",
            "output_dir": tmp,
        })
        print(f"measuring {len(probe.runs)} runs (one seed per cell, {probe.evaluations} evaluations) on "
              f"{args.backend} with {args.workers} workers ...", flush=True)
        report = run_study(probe, backend=args.backend, workers=args.workers, echo=_stderr,
                           progress=lambda tasks: Progress(tasks, True, _stderr))
        store = ResultStore(probe.output_dir)  # the report keeps no records: the store has them
        per_cell = {(r.spec.problem, r.spec.algorithm): extrapolate(r, store.read_records(r.spec.run_key),
                                                                    full.evaluations) for r in report.finished}
    scaled = probe.evaluations != full.evaluations

    width = max(len(p) for p in full.problems) + 2
    col = max(10, *(len(a) + 2 for a in full.algorithms))
    print()
    print(f"seconds per run of {full.evaluations} evaluations"
          + (f" (extrapolated from {probe.evaluations}: per-step time fitted linear in the step)" if scaled else ""))
    print("".ljust(width) + "".join(a.rjust(col) for a in full.algorithms))
    for problem in full.problems:
        print(problem.ljust(width) + "".join(f"{per_cell.get((problem, a), float('nan')):>{col}.1f}" for a in full.algorithms))
    if "erbo" in full.algorithms:  # the `relative_cost` of each algorithm (its scheduling weight)
        ratios = {a: [per_cell[(p, a)] / per_cell[(p, "erbo")] for p in full.problems
                      if (p, a) in per_cell and (p, "erbo") in per_cell] for a in full.algorithms}
        print("x ERBO, mean".ljust(width) + "".join(
            f"{(sum(v) / len(v) if v else float('nan')):>{col}.2f}" for v in ratios.values()))
    for r in report.failed:
        print(f"FAILED {r.spec.label}: {(r.error or '').strip().splitlines()[-1:]}")
    durations = [per_cell[(r.problem, r.algorithm)] for r in full.runs if (r.problem, r.algorithm) in per_cell]
    total_cpu = sum(durations)
    span = makespan(durations, args.workers)
    print()
    print(f"measured in {report.wall_time_s:.0f} s; {len(full.runs)} runs in the full study "
          f"({len(full.problems)} problems x {len(full.algorithms)} algorithms x {len(full.seeds)} seeds)")
    print(f"estimated run time, summed: {total_cpu / 3600:.2f} h; on {args.workers} workers "
          f"(longest first): {span / 3600:.2f} h; {os.cpu_count()} CPUs here")
    print(f"target (issue 15) <= 1.5 h on 2 workers: {'OK' if span <= 1.5 * 3600 else 'MISSED'}"
          + (" (extrapolated: check with the full --evaluations)" if scaled else ""))
    if missing:
        print(f"not registered yet, left out of the estimate: {', '.join(missing)}")


if __name__ == "__main__":
    main()

"""Seconds per 100-evaluation run, per algorithm, on Ackley and Modified Branin (seed 100).

Prints the wall time of each run and its split into GP fit, acquisition maximisation (inner
solves included, also shown on their own) and truth evaluation, then the ratios the issues
name as targets. One torch thread and one BLAS thread, as a Ray task with num_cpus=1 runs.
With `--seeds K` every algorithm runs seeds S..S+K-1 (the algorithms interleaved within each
seed, so drift in the machine's speed falls on all alike), and the targets use the mean time
over seeds; the spread of the paired per-seed ratio is printed beside it.

    .venv/bin/python benchmarks/speed/run_time.py                       # every algorithm
    .venv/bin/python benchmarks/speed/run_time.py --algorithms wdrbo erbo --problems ackley
    .venv/bin/python benchmarks/speed/run_time.py --algorithms wdrbo erbo --problems ackley --seeds 6
    .venv/bin/python benchmarks/speed/run_time.py --algorithms drbo-mmd --option mmd_solver=SCS

`--option KEY=VALUE` applies to every algorithm that declares KEY (see `wdrbo-dist list`);
the "ms/inner" column is the mean time of one inner problem (a DRBO-MMD worst case, a
DRBO-KDE or minimax closed form), "inner n" their number per run, "prog/inner" the conic
programs solved per inner problem (DRBO-MMD's working set: restricted programs, complete ones).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np
import torch

from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.analysis.statistics import mean_se
from wdrbo_dist.execution.allocator import keep_freed_memory
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one

keep_freed_memory()  # as every worker does before its run (execution/task.py, `execute`)

TARGETS = [
    # (description, numerator, denominator, bound) on the Ackley run times
    ("ERBO <= 6 s per Ackley run", "erbo", None, 6.0),
    ("WDRBO <= 30 s per Ackley run", "wdrbo", None, 30.0),
    ("WDRBO <= 1.3x ERBO", "wdrbo", "erbo", 1.3),
    ("DRBO-KDE <= 1.5x SBO-KDE", "drbo-kde", "sbo-kde", 1.5),
    ("DRBO-MMD <= 3x ERBO", "drbo-mmd", "erbo", 3.0),
]
MOST_TIMES_ERBO = 2.0  # no algorithm above this multiple of ERBO's Ackley run time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_algorithms(parser)
    harness.add_problems(parser, ["ackley", "modified-branin"])
    harness.add_evaluations(parser)
    parser.add_argument("--seed", type=int, default=100)
    harness.add_seeds(parser, 1, help="run seeds --seed, --seed + 1, ... and average")
    harness.add_fidelity(parser)
    harness.add_option(parser)
    args = parser.parse_args()
    options = dict(args.option)
    torch.set_num_threads(1)

    seconds: dict[tuple[str, str], list[float]] = {}
    header = (
        f"{'problem':<16} {'algorithm':<18} {'seed':>5} {'run s':>8} {'fit s':>8} {'acq s':>8} {'inner s':>8} "
        f"{'truth s':>8} {'adam/step':>9} {'inner n':>8} {'ms/inner':>8} {'prog/inner':>10}"
    )
    print(header)
    print("-" * len(header))
    for problem in args.problems:
        for seed in range(args.seed, args.seed + args.seeds):
            for algorithm in args.algorithms:
                declared = ALGORITHMS[algorithm].declared_options()
                spec = RunSpec.make(
                    options={k: v for k, v in options.items() if k in declared},
                    algorithm=algorithm, problem=problem, seed=seed, evaluations=args.evaluations,
                    fidelity=args.fidelity,
                )
                start = time.perf_counter()
                result = run_one(spec, capture_errors=False)
                wall = time.perf_counter() - start
                r = result.records
                seconds.setdefault((problem, algorithm), []).append(wall)
                bo = r[~r.is_initial]
                solves = int(r.inner_solves.sum())
                per_solve = 1e3 * r.inner_solve_s.sum() / solves if solves else float("nan")
                programs = int(r.inner_programs.sum()) / solves if solves else float("nan")
                print(
                    f"{problem:<16} {algorithm:<18} {seed:5d} {wall:8.1f} {r.time_fit_s.sum():8.1f} "
                    f"{r.time_acquisition_s.sum():8.1f} {r.inner_solve_s.sum():8.1f} {r.time_truth_s.sum():8.1f} "
                    f"{bo.adam_steps.mean():9.1f} {solves:8d} {per_solve:8.2f} {programs:10.2f}",
                    flush=True,
                )
    print()
    if args.seeds > 1:
        print(f"mean +- SE over {args.seeds} seeds (s per run):")
        for (problem, algorithm), walls in seconds.items():
            summary = mean_se(walls)
            print(f"  {problem:<16} {algorithm:<18} {summary.mean:8.2f} +- {summary.se:.2f}")
        print()
    mean_seconds = {key: float(np.mean(walls)) for key, walls in seconds.items()}
    for description, numerator, denominator, bound in TARGETS:
        if ("ackley", numerator) not in seconds or (denominator and ("ackley", denominator) not in seconds):
            continue
        value = mean_seconds[("ackley", numerator)] / (mean_seconds[("ackley", denominator)] if denominator else 1.0)
        unit = "x" if denominator else " s"
        paired = ""
        if denominator and args.seeds > 1:
            per_seed = np.asarray(seconds[("ackley", numerator)]) / np.asarray(seconds[("ackley", denominator)])
            paired = f"  (per seed {per_seed.min():.2f}-{per_seed.max():.2f}x)"
        print(f"{description:<32} measured {value:6.2f}{unit}  {'met' if value <= bound else 'NOT met'}{paired}")
    for (problem, algorithm), wall in mean_seconds.items():
        if problem == "ackley" and wall > 60.0:
            print(f"every Ackley run <= 60 s: {algorithm} took {wall:.1f} s  NOT met")
    erbo_ackley = mean_seconds.get(("ackley", "erbo"))
    if erbo_ackley:
        above = [f"{a} {w / erbo_ackley:.2f}x" for (p, a), w in mean_seconds.items() if p == "ackley" and w > MOST_TIMES_ERBO * erbo_ackley]
        verdict = "met" if not above else "NOT met: " + ", ".join(above)
        scope = "" if set(ALGORITHMS) <= set(args.algorithms) else " (of those run)"
        print(f"{f'no algorithm above {MOST_TIMES_ERBO:g}x ERBO':<32} {verdict}{scope}")
    for problem in args.problems:
        erbo = mean_seconds.get((problem, "erbo"))
        if erbo:
            ratios = ", ".join(f"{a} {w / erbo:.2f}x" for (p, a), w in mean_seconds.items() if p == problem and a != "erbo")
            print(f"{problem}: run time relative to ERBO: {ratios}")

if __name__ == "__main__":
    main()

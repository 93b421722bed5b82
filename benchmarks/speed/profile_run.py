"""Where a run's time goes, per BO step: GP fit, building the acquisition, the screening pass,
Adam (its forward and backward passes apart), inner solves, the rest.

Each phase is timed by a thin wrapper around the package function that does it (patched in
this process only; the records are the same as without it), summed over the run's BO steps
and divided by their number, after a short warm-up run (imports, first-call compilation). One torch thread and one BLAS thread, as a Ray task with
num_cpus=1 runs.

    .venv/bin/python benchmarks/speed/profile_run.py                      # every algorithm, Ackley, 100 evaluations
    .venv/bin/python benchmarks/speed/profile_run.py --algorithms wdrbo erbo --evaluations 60
    .venv/bin/python benchmarks/speed/profile_run.py --algorithms sbo-kde --option kde_samples=1024

Columns (ms per BO step): fit = `fit_gp`; build = the algorithm's `acquisition(...)` (features,
Cholesky products, Lipschitz points); screen = the raw-sample pass of `maximize_acquisition`;
adam fwd / adam bwd / adam rest = the acquisition's value (with its gradient, where
`value_and_gradient` gives it without autograd), `torch.autograd.grad` and the rest
(Adam's update, clamping, the stopping rule) inside `adam_ascent` (an inner solve called from
the forward pass counts in fwd and in inner; screening's in screen and inner); inner = the records'
`inner_solve_s`; other = step time not in the above (truth evaluation, bookkeeping). Then the
Adam steps per BO step and the share of the step spent maximising the acquisition.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import torch

from wdrbo_dist.acquisition import optimize
from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.execution.allocator import keep_freed_memory
from wdrbo_dist.models import fit
from wdrbo_dist.run.loop import run_one
from wdrbo_dist.run.spec import RunSpec

keep_freed_memory()  # as every worker does before its run (execution/task.py, `execute`)

PHASES = ("fit", "build", "screen", "adam fwd", "adam bwd", "adam rest", "inner", "other")


class Clock:
    """Seconds per phase of one run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def timed(self, phase: str, function: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
        return wrapper


def profile(spec: RunSpec) -> tuple[dict[str, float], float, float]:
    """(ms per BO step by phase, Adam steps per BO step, acquisition share of the step)."""
    clock = Clock()
    algorithm_class = ALGORITHMS[spec.algorithm]
    saved = (fit.fit_gp, optimize.maximize_acquisition, optimize.adam_ascent, torch.autograd.grad,
             algorithm_class.acquisition)

    def adam(acquisition, starts, bounds, settings):
        class Timed:  # the acquisition's value, with its closed-form gradient where it has one
            __call__ = staticmethod(clock.timed("adam fwd", acquisition))
            if hasattr(acquisition, "value_and_gradient"):
                value_and_gradient = staticmethod(clock.timed("adam fwd", acquisition.value_and_gradient))
        start = time.perf_counter()
        try:
            return saved[2](Timed(), starts, bounds, settings)
        finally:
            clock.seconds["adam"] += time.perf_counter() - start

    def maximize(acquisition, bounds, settings, generator):
        start = time.perf_counter()
        adam_before = clock.seconds["adam"]
        try:
            return saved[1](acquisition, bounds, settings, generator)
        finally:
            total = time.perf_counter() - start
            clock.seconds["maximize"] += total
            clock.seconds["screen"] += total - (clock.seconds["adam"] - adam_before)

    fit.fit_gp = clock.timed("fit", saved[0])
    optimize.maximize_acquisition = maximize
    optimize.adam_ascent = adam
    torch.autograd.grad = clock.timed("adam bwd", saved[3])
    algorithm_class.acquisition = clock.timed("build", saved[4])
    try:
        result = run_one(spec, capture_errors=False)
    finally:
        (fit.fit_gp, optimize.maximize_acquisition, optimize.adam_ascent, torch.autograd.grad,
         algorithm_class.acquisition) = saved
    steps = result.records[~result.records["is_initial"]]
    n = len(steps)
    step_time = float(steps["time_step_s"].sum())
    seconds = dict(clock.seconds)
    seconds["adam rest"] = seconds.get("adam", 0.0) - seconds.get("adam fwd", 0.0) - seconds.get("adam bwd", 0.0)
    seconds["inner"] = float(steps["inner_solve_s"].sum())
    seconds["other"] = step_time - sum(seconds.get(p, 0.0) for p in ("fit", "build", "maximize"))
    per_step = {phase: 1000 * seconds.get(phase, 0.0) / n for phase in PHASES}
    share = (seconds["build"] + seconds["maximize"]) / step_time
    return per_step, float(steps["adam_steps"].sum()) / n, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_run_arguments(parser)
    harness.add_fidelity(parser)
    harness.add_option(parser, help="for every algorithm that declares KEY")
    args = parser.parse_args()
    specs = harness.checked_specs(args, dict(args.option))  # a bad field: one line, exit 2, before any output

    print(f"ms per BO step, {args.problem}, seed {args.seed}, {args.evaluations} evaluations, {args.fidelity}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread" + "".join(f", {key}={value}" for key, value in args.option))
    print(f"{'algorithm':<18}" + "".join(f"{p:>10}" for p in PHASES) + f"{'adam/step':>11}{'acq share':>11}")
    for name, spec in specs.items():
        # A short run first: the first BO step of a process imports and compiles (seconds), which
        # a study's workers pay once per process, not per run.
        run_one(replace(spec, evaluations=4, init_size=2), capture_errors=False)
        per_step, adam_steps, share = profile(spec)
        print(f"{name:<18}" + "".join(f"{per_step[p]:>10.1f}" for p in PHASES) + f"{adam_steps:>11.1f}{share:>10.0%}",
              flush=True)


if __name__ == "__main__":
    main()

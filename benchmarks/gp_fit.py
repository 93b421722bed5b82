"""The GP fit's MAP objective (option `gp_objective`): NumPy's `_MapObjective` (0.13.0's records,
the reference profile's) or the compiled kernels of models/compiled_fit.py (the paper
profile's since 0.14.0). Same method? At what speed?

`--fit` times whole fits (`fit_gp`: L-BFGS-B from the prior modes, ~20-60 objective
evaluations) and one objective evaluation with each, on data of n points in D = 3 dimensions
(a smooth function plus noise, one thread): the fit is part of every BO step of every
algorithm. Without it, whole runs on the same seeds, paired (`paired_variants.py`): the two
objectives agree to ~1e-13, enough for L-BFGS-B to stop a few ulps apart and for one seed's
trajectories to part after some BO steps, so they are compared over seeds.

    .venv/bin/python benchmarks/gp_fit.py --fit
    .venv/bin/python benchmarks/gp_fit.py --algorithms erbo wdrbo gp-ucb sbo-kde --seeds 8
"""

from __future__ import annotations

import argparse
import time

from paired_variants import add_run_arguments, compare  # one thread per run, set before NumPy loads

OBJECTIVES: dict[str, dict[str, object]] = {"numpy": {"gp_objective": "numpy"}, "compiled": {"gp_objective": "compiled"}}
SIZES = (10, 20, 40, 60, 80, 99)


def fit_times(repeats: int = 20) -> None:
    """ms per fit and us per objective evaluation, each objective, for every n in SIZES."""
    import numpy as np
    import torch

    from wdrbo_dist.models.compiled_fit import CompiledMapObjective
    from wdrbo_dist.models.gp import _MapObjective, fit_gp, lengthscale_prior, standardize

    def best_seconds(call, runs: int) -> float:  # type: ignore[no-untyped-def]
        call()  # the first call compiles (numba) or warms the caches
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(runs):
                call()
            times.append((time.perf_counter() - start) / runs)
        return min(times)

    print(f"one thread, D = 3, best of 3 x {repeats} fits / x {repeats * 50} evaluations")
    print(f"{'n':>4} {'fit numpy ms':>13} {'fit compiled ms':>16} {'ratio':>6} {'eval numpy us':>14} "
          f"{'eval compiled us':>17} {'ratio':>6}")
    for n in SIZES:
        generator = torch.Generator().manual_seed(n)
        x = torch.rand(n, 3, generator=generator, dtype=torch.float64)
        y = torch.sin(6 * x).sum(-1) + 0.1 * torch.randn(n, generator=generator, dtype=torch.float64)
        fits = [best_seconds(lambda c=compiled: fit_gp(x, y, torch.Generator().manual_seed(0), compiled_objective=c),
                             repeats) for compiled in (False, True)]
        host_x, host_y = x.numpy(), standardize(y)[0].numpy()
        theta = np.array([0.3, 0.4, 0.5, 0.01, 0.1])
        objectives = (_MapObjective(host_x, host_y, lengthscale_prior(3)),
                      CompiledMapObjective(host_x, host_y, lengthscale_prior(3)))
        evaluations = [best_seconds(lambda o=objective: o(theta), repeats * 50) for objective in objectives]
        print(f"{n:>4} {fits[0] * 1e3:>13.2f} {fits[1] * 1e3:>16.2f} {fits[1] / fits[0]:>6.2f} "
              f"{evaluations[0] * 1e6:>14.0f} {evaluations[1] * 1e6:>17.0f} {evaluations[1] / evaluations[0]:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="time fits and objective evaluations instead of comparing runs")
    add_run_arguments(parser, problems=["ackley", "newsvendor", "modified-branin"], seeds=8,
                      algorithms=["erbo", "wdrbo", "gp-ucb", "sbo-kde"])
    args = parser.parse_args()
    if args.fit:
        fit_times()
        return
    compare(args.algorithms, args.problems, OBJECTIVES, args.seeds, args.evaluations, "paper", args.workers,
            first_seed=args.first_seed)


if __name__ == "__main__":
    main()

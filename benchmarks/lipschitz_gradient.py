"""The Adam step of the algorithms with option `adam_pass` (paper profile), two choices.
`--compare pass` (the default): the acquisition and its x-gradient by torch's autograd, WDRBO's
L(x) in the mean term's pass with the Jacobian in NumPy (option `adam_pass: torch`, the
reference profile's; 0.9.0's records for WDRBO, 0.11.0's for ERBO and SBO-KDE, 0.12.0's for
DRBO-KDE, the minimax and StableOpt, 0.15.0's for DRBO-MMD, 0.19.0's for GP-UCB), or the compiled
kernels (`compiled`, the paper profile's since 0.12.0 for ERBO, WDRBO and SBO-KDE, since 0.13.0
for DRBO-KDE, the minimax and StableOpt, since 0.16.0 for DRBO-MMD, since 0.20.0 for GP-UCB: the
mean term and L(x) with closed-form x-gradients, the UCB at every (candidate, context) pair with
the x-gradient of any function of them, or GP-UCB's posterior UCB and its gradient). `--compare gradient`: WDRBO's
x-gradient of L(x) in closed form (option `wdrbo_L_gradient: analytic`, since 0.7.0) or by
autograd's double backward (0.6.0's records), both on torch's pass. `--compare sparse`: the
minimax's compiled backward pass over every grid point (0.14.0's records) or over the points of
nonzero weight only (option `minimax_sparse_gradient`, since 0.15.0). `--compare minimum`:
StableOpt's value and x-gradient at the minimising contexts by torch's posterior and autograd
(0.15.0's records) or by the pair kernel (option `stable_compiled_gradient`, since 0.16.0).
`--compare exp`: the fresh contexts' exponentials of StableOpt's and DRBO-KDE's compiled calls
by libm (0.16.0's records) or by a polynomial within 1 ulp (option `fresh_exp`, since 0.17.0).
Same method? At what speed?

Each pair agrees to ~1e-12 relative (tests/acquisition/test_wdrbo.py), which is enough for one
seed's trajectories to part after a few BO steps, so the routes are compared over seeds, paired
(`paired_variants.py`). `--step` prints instead what one Adam step costs (forward and backward
of the acquisition for 10 candidates on a GP of n points, one thread, best of 5 repeats of 300;
DRBO-KDE's 5 candidates, as its optimiser's restarts, and repeats of 60 for the three that
evaluate 1,024 contexts per candidate).

    .venv/bin/python benchmarks/lipschitz_gradient.py --step                 # ms per Adam step, n = 99
    .venv/bin/python benchmarks/lipschitz_gradient.py --step --n 40 --dim-c 2
    .venv/bin/python benchmarks/lipschitz_gradient.py                        # ERBO and WDRBO, Ackley and Newsvendor, 10 seeds
    .venv/bin/python benchmarks/lipschitz_gradient.py --compare gradient --algorithms wdrbo --problems toy-general --seeds 15
"""

from __future__ import annotations

import argparse
import time

from paired_variants import add_run_arguments, compare, count  # sets one thread per process before torch is imported

COMPARISONS: dict[str, dict[str, dict[str, object]]] = {
    "pass": {"torch": {"adam_pass": "torch"}, "compiled": {"adam_pass": "compiled"}},
    "gradient": {
        "autograd": {"wdrbo_L_gradient": "autograd", "adam_pass": "torch"},
        "analytic": {"wdrbo_L_gradient": "analytic", "adam_pass": "torch"},
    },
    "sparse": {"dense": {"minimax_sparse_gradient": False}, "sparse": {"minimax_sparse_gradient": True}},
    "minimum": {"torch": {"stable_compiled_gradient": False}, "kernel": {"stable_compiled_gradient": True}},
    "exp": {"libm": {"fresh_exp": "libm"}, "polynomial": {"fresh_exp": "polynomial"}},
}


def step_times(n: int, dim_c: int = 1, repeats: int = 5, calls: int = 300) -> dict[str, float]:
    """ms per forward + backward of each acquisition for 10 candidates: one decision dimension,
    `dim_c` context dimensions (1: the basis route of the compiled kernel at n >~ 20; 2: V = I)."""
    import torch

    from wdrbo_dist.acquisition.ucb import UpperConfidenceBound
    from wdrbo_dist.acquisition.wdrbo import WassersteinUCB
    from wdrbo_dist.models.gp import GaussianProcess

    generator = torch.Generator().manual_seed(0)
    train = torch.rand(n, 1 + dim_c, generator=generator, dtype=torch.float64)
    model = GaussianProcess(train, torch.randn(n, generator=generator, dtype=torch.float64),
                            torch.tensor([0.2] + [0.3] * dim_c, dtype=torch.float64), 1e-3, 0.1, context_basis=True)
    nodes, weights = train[:, 1:], torch.full((n,), 1.0 / n, dtype=torch.float64)
    points = torch.rand(100, dim_c, generator=generator, dtype=torch.float64)
    radius = 0.3 / n**0.5
    acquisitions = {
        "erbo, torch": WassersteinUCB(model, nodes, weights, 0.0, None, 1.5),
        "erbo, compiled": WassersteinUCB(model, nodes, weights, 0.0, None, 1.5, compiled=True),
        "wdrbo, L detached": WassersteinUCB(model, nodes, weights, radius, points, 1.5, detach_lipschitz=True),
        "wdrbo, autograd": WassersteinUCB(model, nodes, weights, radius, points, 1.5, detach_lipschitz=False,
                                          analytic_gradient=False),
        "wdrbo, torch": WassersteinUCB(model, nodes, weights, radius, points, 1.5, detach_lipschitz=False,
                                       analytic_gradient=True),
        "wdrbo, compiled": WassersteinUCB(model, nodes, weights, radius, points, 1.5, detach_lipschitz=False,
                                          compiled=True),
    }
    x = torch.rand(10, 1, generator=generator, dtype=torch.float64).requires_grad_(True)
    steps = {label: (acquisition, x) for label, acquisition in acquisitions.items()}
    decisions = GaussianProcess(train[:, :1], model.train_y, model.lengthscale[:1], 1e-3, 0.1)  # GP-UCB's GP: x alone
    for route in ("torch", "compiled"):
        steps[f"gp-ucb, {route}"] = (UpperConfidenceBound(decisions, 1.5, compiled=route == "compiled"), x)
    return _best_ms(steps, repeats, calls, 20)


def _best_ms(steps: dict, repeats: int, calls: int, warm_up: int) -> dict[str, float]:
    """{label: ms per forward + backward}, best of `repeats` timings of `calls` steps each, for
    `steps` {label: (acquisition, candidates)}, interleaved so that a slow spell of the machine
    hits every variant."""
    import torch

    best = {label: float("inf") for label in steps}
    for _ in range(repeats):
        for label, (acquisition, x) in steps.items():
            for _ in range(warm_up):
                torch.autograd.grad(acquisition(x).sum(), x)
            start = time.perf_counter()
            for _ in range(calls):
                torch.autograd.grad(acquisition(x).sum(), x)
            best[label] = min(best[label], (time.perf_counter() - start) / calls * 1e3)
    return best


def pair_step_times(n: int, dim_c: int = 1, repeats: int = 5, calls: int = 60) -> dict[str, float]:
    """ms per Adam step of the three acquisitions that take the pair kernels, as `step_times`
    (two decision dimensions; 1,024 KDE samples, grid points or fresh Sobol contexts)."""
    import torch

    from wdrbo_dist.acquisition.drbo_kde import DRBOKDEAcquisition
    from wdrbo_dist.acquisition.mmd_common import context_gram, context_grid, empirical_pmf
    from wdrbo_dist.acquisition.mmd_minimax import MinimaxAcquisition
    from wdrbo_dist.acquisition.stableopt import MinimumUCB
    from wdrbo_dist.models.gp import GaussianProcess

    generator = torch.Generator().manual_seed(0)
    train = torch.rand(n, 2 + dim_c, generator=generator, dtype=torch.float64)
    model = GaussianProcess(train, torch.randn(n, generator=generator, dtype=torch.float64),
                            torch.tensor([0.2, 0.2] + [0.3] * dim_c, dtype=torch.float64), 1e-3, 0.1, context_basis=True)
    box = torch.tensor([[0.0] * dim_c, [1.0] * dim_c], dtype=torch.float64)
    samples = torch.rand(1024, dim_c, generator=generator, dtype=torch.float64)
    grid = context_grid(box, 1024, False)
    weights, gram = empirical_pmf(train[:, 2:], grid), context_gram(grid, model.lengthscale[2:])
    acquisitions = {}
    for route in ("torch", "compiled"):
        compiled = route == "compiled"
        acquisitions[f"drbo-kde, {route}"] = DRBOKDEAcquisition(model, 1.5, samples, 0.3, 1024, box,
                                                                torch.Generator().manual_seed(1), compiled=compiled)
        acquisitions[f"minimax, {route}"] = MinimaxAcquisition(model, 1.5, grid, weights, gram, 0.3, False, False,
                                                               compiled=compiled)
        if compiled:
            acquisitions["minimax, sparse"] = MinimaxAcquisition(model, 1.5, grid, weights, gram, 0.3, False, False,
                                                                 compiled=True, sparse_gradient=True)
        acquisitions[f"stableopt, {route}"] = MinimumUCB(model, 1.5, box, 1024, torch.Generator().manual_seed(1),
                                                         compiled=compiled)
        if compiled:
            acquisitions["stableopt, kernel"] = MinimumUCB(model, 1.5, box, 1024, torch.Generator().manual_seed(1),
                                                           compiled=True, compiled_gradient=True)
    x = {5: torch.rand(5, 2, generator=generator, dtype=torch.float64).requires_grad_(True)}
    x[10] = torch.rand(10, 2, generator=generator, dtype=torch.float64).requires_grad_(True)
    steps = {label: (acquisition, x[5 if label.startswith("drbo-kde") else 10]) for label, acquisition in acquisitions.items()}
    return _best_ms(steps, repeats, calls, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, problems=["ackley", "newsvendor"], seeds=10)
    parser.add_argument("--algorithms", nargs="+", choices=["erbo", "wdrbo", "gp-ucb", "sbo-kde", "drbo-kde", "drbo-mmd",
                                                            "drbo-mmd-minimax", "stableopt"], default=["erbo", "wdrbo"],
                        help="--compare pass and exp: whose routes (gradient: WDRBO's; sparse: the minimax's; "
                             "minimum: StableOpt's)")
    parser.add_argument("--compare", choices=list(COMPARISONS), default="pass", help="which two routes to run")
    parser.add_argument("--step", action="store_true", help="time one Adam step instead of comparing runs")
    parser.add_argument("--n", type=count, default=99, help="--step: training points of the GP")
    parser.add_argument("--dim-c", type=count, default=1, help="--step: context dimensions")
    args = parser.parse_args()
    if args.step:
        for label, ms in step_times(args.n, args.dim_c).items():
            print(f"{label:<20} {ms:.3f} ms per Adam step (forward + backward, 10 candidates, n = {args.n}, "
                  f"d_c = {args.dim_c})")
        for label, ms in pair_step_times(args.n, args.dim_c).items():
            print(f"{label:<20} {ms:.3f} ms per Adam step (forward + backward, {5 if 'kde' in label else 10} "
                  f"candidates, n = {args.n}, d_c = {args.dim_c})")
        return
    algorithms = {"pass": args.algorithms, "gradient": ["wdrbo"], "sparse": ["drbo-mmd-minimax"],
                  "minimum": ["stableopt"], "exp": args.algorithms}[args.compare]
    compare(algorithms, args.problems, COMPARISONS[args.compare], args.seeds, args.evaluations, "paper", args.workers,
            first_seed=args.first_seed)


if __name__ == "__main__":
    main()

"""The numerical routes one call at a time: how far from a direct solve, and how fast.

This measures what sets the constants that choose between a computation's routes (the
fields of NumericalSettings, wdrbo_dist/models/settings.py, and the cuts and crossovers inside
them), one thread, random or fitted data, seed 0:

    accuracy     how far each rank cut's posterior variances are from a direct solve
                 (`GaussianProcess.posterior`), beside the V = I route's (an [n, n] form):
                 the cut runs take is kernel.BASIS_TOLERANCE
    region       how far fresh contexts on a lattice of a box, inside it and beyond it lie
                 from the span of the box's basis at each rank cut, against the check's
                 allowance (REGION_RESIDUAL_FACTOR, models/context_features.py)
    forms-step   ms per acquisition call (10 candidates, forward and backward) on the pair
                 and the forms route over n and N: where forms pay (FORMS_MIN_POINTS);
                 --wdrbo: WDRBO's call (N = n, 100 Lipschitz points)
    adam-step    ms per Adam step of every acquisition on torch's and the compiled pass

    .venv/bin/python benchmarks/speed/routes.py accuracy --problems modified-branin portfolio-uniform
    .venv/bin/python benchmarks/speed/routes.py region --problems modified-branin portfolio-uniform ackley
    .venv/bin/python benchmarks/speed/routes.py forms-step --wdrbo
    .venv/bin/python benchmarks/speed/routes.py adam-step --n 40 --dim-c 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

from wdrbo_dist.models.settings import CPU, NumericalSettings

# The routes are NumericalSettings (a run's come from its device); this measures one against
# another on models built on each: CPU, the CPU's, and PAIRS, the pair products everywhere.
PAIRS = NumericalSettings(context_basis=False)

ACCURACY_TOLERANCES = (0.0, 1e-11, 1e-10, 1e-9, 1e-8)


def _fitted(name: str, points: int):  # type: ignore[no-untyped-def]
    """(problem, observed x, the observation, the GP fitted on them, the generator after them)
    for `points` random decisions of problem `name` (seed 0)."""
    import torch

    from wdrbo_dist.models.fit import fit_gp
    from wdrbo_dist.problems import make_problem

    problem = make_problem(name)
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(points, problem.dim_x, generator=generator, dtype=torch.float64)
    observed = problem.observe(x, generator)
    model, _ = fit_gp(torch.cat([x, observed.context], -1), observed.y, generator, CPU)
    return problem, x, observed, model, generator


def accuracy(problems: list[str], points: int = 99, contexts: int = 512, candidates: int = 200) -> None:
    """Posterior variances at `candidates` decisions (half near the data, half uniform) x
    `contexts` KDE samples of a GP fitted on `points` random observations, by each rank cut and
    by V = I, against `GaussianProcess.posterior` (a triangular solve per pair): the largest
    differences."""
    import torch

    from wdrbo_dist.acquisition.kde import kde_samples
    from wdrbo_dist.models.kernel import VARIANCE_FLOOR, numerical_basis, rbf

    print(f"max |variance - posterior()'s| over {candidates} decisions x {contexts} KDE samples, "
          f"GP on {points} random observations (seed 0)")
    print(f"{'problem':<18} {'V = I':>9} " + " ".join(f"{f'cut {t:g}':>16}" for t in ACCURACY_TOLERANCES))
    for name in problems:
        problem, x, observed, model, generator = _fitted(name, points)
        samples = kde_samples(observed.context, contexts, problem.context_bounds, generator)
        half = min(candidates // 2, points)
        near = (x[:half] + 0.01 * torch.randn(half, problem.dim_x, generator=generator, dtype=torch.float64)).clamp(0, 1)
        decisions = torch.cat([near, torch.rand(candidates - near.shape[0], problem.dim_x, generator=generator,
                                                dtype=torch.float64)])
        dim_x = problem.dim_x
        k_x = rbf(decisions, model.train_x[:, :dim_x], model.lengthscale[:dim_x])  # [b, n]
        k_c = rbf(samples, model.train_x[:, dim_x:], model.lengthscale[dim_x:])  # [N, n]
        pairs = torch.cat([decisions.unsqueeze(1).expand(-1, contexts, -1),
                           samples.unsqueeze(0).expand(decisions.shape[0], -1, -1)], -1)
        _, direct = model.posterior(pairs)  # [b, N]: 1 - ||L^{-1} k||^2, a triangular solve per pair

        forms = k_x.unsqueeze(-1) * model.inverse * k_x.unsqueeze(-2)  # [b, n, n]: diag(kx) K^{-1} diag(kx)

        def variances(vectors: torch.Tensor, forms: torch.Tensor) -> torch.Tensor:
            return (1.0 - ((vectors @ forms) * vectors).sum(-1)).clamp_min(VARIANCE_FLOOR)

        cells = [f"{float((variances(k_c, forms) - direct).abs().max()):9.1e}"]
        for tolerance in ACCURACY_TOLERANCES:
            basis, coefficients = numerical_basis(k_c, tolerance)  # a = V^T kc, B_b = V^T forms_b V
            error = float((variances(coefficients, basis.T @ forms @ basis) - direct).abs().max())
            cells.append(f"{error:8.1e} (r {basis.shape[1]:2d})")
        print(f"{name:<18} " + " ".join(cells))
    print(f"(r: the basis's rank of n = {points}; cut 0: numpy's rank tolerance, sigma_1 * rows * eps)")


def region(problems: list[str], points: int = 99, contexts: int = 1024) -> None:
    """For the basis of a box's fresh contexts (`GaussianProcess.region_basis`, the problem's
    context box) at each rank cut: its rank, the largest projection residual of the contexts
    on a lattice of 9 points per axis of the box, of `contexts` uniform contexts inside it, and
    of as many beyond it (up to 30 % of its width past the upper bound), with the check's
    allowance (`Region.residual_max`). Each cut replaces the runs' (kernel.BASIS_TOLERANCE) in
    `region_basis` for the measurement."""
    import functools

    import torch

    from wdrbo_dist.models import context_features, kernel
    from wdrbo_dist.models.kernel import rbf

    print(f"largest projection residual onto the box's basis, GP on {points} random observations (seed 0): "
          "9-point lattice / inside / beyond (allowed)")
    print(f"{'problem':<18} " + " ".join(f"{f'cut {t:g}':>44}" for t in ACCURACY_TOLERANCES))
    for name in problems:
        problem, _, _, fitted, generator = _fitted(name, points)
        box = problem.context_bounds.to(torch.float64)
        width = box[1] - box[0]
        inside = box[0] + width * torch.rand(contexts, problem.dim_c, generator=generator, dtype=torch.float64)
        beyond = box[1] + 0.3 * width * torch.rand(contexts, problem.dim_c, generator=generator, dtype=torch.float64)
        cells = []
        for tolerance in ACCURACY_TOLERANCES:
            context_features.numerical_basis = functools.partial(kernel.numerical_basis, relative_tolerance=tolerance)
            found = fitted.region_basis(box)
            if found is None:
                cells.append(f"{'no region (grid too large)':>44}")
                continue
            basis = found.basis

            def residual(contexts: torch.Tensor) -> float:
                vectors = rbf(contexts, fitted.train_x[:, problem.dim_x:], fitted.lengthscale[problem.dim_x:])
                return float((vectors - (vectors @ basis) @ basis.T).abs().max())

            steps = [torch.linspace(float(lo), float(hi), 9, dtype=torch.float64) for lo, hi in zip(box[0], box[1])]
            lattice = torch.cartesian_prod(*steps).reshape(-1, problem.dim_c)
            cells.append(f"r {basis.shape[1]:2d}: {residual(lattice):.0e} / {residual(inside):.0e} / "
                         f"{residual(beyond):.0e} ({found.residual_max:.0e})")
        print(f"{name:<18} " + " ".join(f"{cell:>44}" for cell in cells))
    context_features.numerical_basis = kernel.numerical_basis


def forms_step(
    sizes: list[int], contexts: list[int] | None, candidates: int = 10, repeats: int = 20, gradient_points: int = 0
) -> None:
    """ms per forward + backward call of `ucb_from_features` on each route, for data of n points
    (d_x = 2, d_c = 2) and N contexts (`contexts` None: N = n, WDRBO's observed contexts), with context gradients at `gradient_points`
    points taken outside autograd (WDRBO's detach_gradient); the forms route's share of the
    pairs route's time."""
    import torch

    from wdrbo_dist.models import gp, pair_routes

    pair_routes.FORMS_MIN_POINTS = 0  # the forms route at every n, to find where it pays
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print(f"ms per call ({candidates} candidates, forward + backward"
          + (f", context gradients at {gradient_points} points" if gradient_points else "") + "), one thread")
    print(f"{'n':>4} {'N':>5} {'pairs':>8} {'forms':>8} {'forms/pairs':>12}")
    for n in sizes:
        train = torch.rand(n, 4, generator=generator, dtype=torch.float64)
        y = torch.randn(n, generator=generator, dtype=torch.float64)
        lengthscale = torch.full((4,), 0.3, dtype=torch.float64)
        points = torch.rand(gradient_points, 2, generator=generator, dtype=torch.float64) if gradient_points else None
        for n_contexts in contexts or [n]:
            c = torch.rand(n_contexts, 2, generator=generator, dtype=torch.float64)
            x0 = torch.rand(candidates, 2, generator=generator, dtype=torch.float64)
            times = []
            for forms in (False, True):
                pair_routes.FORMS_MAX_BATCH = candidates if forms else 0  # the forms route, or the pairs
                model = gp.GaussianProcess(train, y, lengthscale, 1e-3, 0.0, settings=PAIRS)
                features = model.context_features(c, points)

                def call() -> None:
                    x = x0.clone().requires_grad_()
                    ucb, _ = model.ucb_from_features(x, features, 1.5, detach_gradient=points is not None)
                    torch.autograd.grad(ucb.sum(), x)

                call()
                start = time.perf_counter()
                for _ in range(repeats):
                    call()
                times.append((time.perf_counter() - start) / repeats * 1e3)
            print(f"{n:>4} {n_contexts:>5} {times[0]:>8.2f} {times[1]:>8.2f} {times[1] / times[0]:>12.2f}")


def adam_step(n: int, dim_c: int = 1, repeats: int = 5, calls: int = 300) -> dict[str, float]:
    """ms per forward + backward of each acquisition for 10 candidates: one decision dimension,
    `dim_c` context dimensions (1: the basis route of the compiled kernel at n >~ 20; 2: V = I)."""
    import torch

    from wdrbo_dist.acquisition.ucb import UpperConfidenceBound
    from wdrbo_dist.acquisition.wdrbo import WassersteinUCB
    from wdrbo_dist.models.gp import GaussianProcess

    generator = torch.Generator().manual_seed(0)
    train = torch.rand(n, 1 + dim_c, generator=generator, dtype=torch.float64)
    model = GaussianProcess(train, torch.randn(n, generator=generator, dtype=torch.float64),
                            torch.tensor([0.2] + [0.3] * dim_c, dtype=torch.float64), 1e-3, 0.1, settings=CPU)
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
    """ms per Adam step of the three acquisitions that take the pair kernels, as `adam_step`
    (two decision dimensions; 1,024 KDE samples, grid points or fresh Sobol contexts)."""
    import torch

    from wdrbo_dist.acquisition.drbo_kde import DRBOKDEAcquisition
    from wdrbo_dist.acquisition.mmd.grid import context_gram, context_grid, empirical_pmf
    from wdrbo_dist.acquisition.mmd_minimax import MinimaxAcquisition
    from wdrbo_dist.acquisition.stableopt import MinimumUCB
    from wdrbo_dist.models.gp import GaussianProcess

    generator = torch.Generator().manual_seed(0)
    train = torch.rand(n, 2 + dim_c, generator=generator, dtype=torch.float64)
    model = GaussianProcess(train, torch.randn(n, generator=generator, dtype=torch.float64),
                            torch.tensor([0.2, 0.2] + [0.3] * dim_c, dtype=torch.float64), 1e-3, 0.1, settings=CPU)
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
        acquisitions[f"stableopt, {route}"] = MinimumUCB(model, 1.5, box, 1024, torch.Generator().manual_seed(1),
                                                         compiled=compiled)
    x = {5: torch.rand(5, 2, generator=generator, dtype=torch.float64).requires_grad_(True)}
    x[10] = torch.rand(10, 2, generator=generator, dtype=torch.float64).requires_grad_(True)
    steps = {label: (acquisition, x[5 if label.startswith("drbo-kde") else 10]) for label, acquisition in acquisitions.items()}
    return _best_ms(steps, repeats, calls, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("accuracy", "region"):
        command = commands.add_parser(name)
        harness.add_problems(command, ["modified-branin", "portfolio-uniform", "ackley"])
    forms = commands.add_parser("forms-step")
    forms.add_argument("--wdrbo", action="store_true", help="WDRBO's call (N = n, 100 Lipschitz points)")
    adam = commands.add_parser("adam-step")
    adam.add_argument("--n", type=harness.count, default=99, help="training points of the GP")
    adam.add_argument("--dim-c", type=harness.count, default=1, help="context dimensions")
    args = parser.parse_args()
    if args.command == "accuracy":
        accuracy(args.problems)
    elif args.command == "region":
        region(args.problems)
    elif args.command == "forms-step" and args.wdrbo:
        forms_step([30, 40, 48, 60, 80, 99], None, gradient_points=100)
    elif args.command == "forms-step":
        forms_step([30, 40, 48, 60, 80, 99], [100, 512, 1024, 2048])
    else:
        for label, ms in adam_step(args.n, args.dim_c).items():
            print(f"{label:<20} {ms:.3f} ms per Adam step (forward + backward, 10 candidates, n = {args.n}, "
                  f"d_c = {args.dim_c})")
        for label, ms in pair_step_times(args.n, args.dim_c).items():
            print(f"{label:<20} {ms:.3f} ms per Adam step (forward + backward, {5 if 'kde' in label else 10} "
                  f"candidates, n = {args.n}, d_c = {args.dim_c})")


if __name__ == "__main__":
    main()

"""The GP's routes for context sets, compared over seeds. Same method? At what speed?

`--compare route` (the default): a numerical basis of the context vectors (option
`context_basis`, models/gp.py; the default since version 0.6.0; for contexts drawn afresh in a
known box, one basis of the box's vectors) or the n(n+1)/2 pair products and an [n, n] form per
fresh candidate (version 0.5.0's records). The two agree to ~1e-11 (tests/models/test_gp.py:
the basis route is nearer a direct Cholesky solve).

`--compare tolerance`: the basis's rank (option `basis_tolerance`): numpy's rank cut, sigma_1 *
rows * eps (`0`, the records of 0.17.0 and the reference profile's), or sigma_1 * 1e-11 (the
paper profile's 0.18.0-0.20.0), which matters on two context dimensions (Branin, the
portfolios), where numpy's cut keeps 50-80 of 99 vectors (the kernels take V = I above ~75).
`--compare cut`: 0.20.0's cuts (sigma_1 * 1e-11; a box's basis at numpy's rank) or 0.21.0's
(both at sigma_1 * 1e-9, option `region_tolerance` for the box's: the paper profile's since 0.21.0).

`--compare forms`: how a torch call on the basis route forms its candidates' B_b (option
`basis_forms`): one small product per candidate (`batched`, torch's bmm) or one product with
V^T for all of them (`one_product`); the same values to ~1e-15, the screening pass faster.

Either is enough for one seed's trajectories to part after a few BO steps, so the routes are
compared over seeds, paired (`paired_variants.py`). `--accuracy` prints instead how far each
rank cut's posterior variances are from a direct solve (`GaussianProcess.posterior`), beside
how far the V = I route's (an [n, n] form through K^{-1}) are; `--region`, how far fresh
contexts inside and beyond a box lie from the span of the box's cut basis.

    .venv/bin/python benchmarks/context_basis.py                       # ERBO, WDRBO, SBO-KDE on Ackley, 6 seeds
    .venv/bin/python benchmarks/context_basis.py --algorithms sbo-kde stableopt --problems ackley newsvendor --seeds 10
    .venv/bin/python benchmarks/context_basis.py --compare tolerance --algorithms sbo-kde drbo-kde \\
        drbo-mmd-minimax --problems modified-branin portfolio-uniform portfolio-normal --seeds 8
    .venv/bin/python benchmarks/context_basis.py --accuracy --problems modified-branin portfolio-uniform
    .venv/bin/python benchmarks/context_basis.py --region --problems modified-branin portfolio-uniform ackley
"""

from __future__ import annotations

import argparse

from paired_variants import add_run_arguments, compare  # sets one thread per process before torch is imported

ACCURACY_TOLERANCES = (0.0, 1e-11, 1e-10, 1e-9, 1e-8)

COMPARISONS: dict[str, dict[str, dict[str, object]]] = {
    "route": {"pairs": {"context_basis": False}, "basis": {"context_basis": True}},
    "tolerance": {"numpy": {"basis_tolerance": 0.0}, "1e-11": {"basis_tolerance": 1e-11}},
    "cut": {"0.20.0": {"basis_tolerance": 1e-11, "region_tolerance": 0.0},
            "0.21.0": {"basis_tolerance": 1e-9, "region_tolerance": 1e-9}},
    "forms": {"batched": {"basis_forms": "batched"}, "one_product": {"basis_forms": "one_product"}},
}


def _fitted(name: str, points: int):  # type: ignore[no-untyped-def]
    """(problem, observed x, the observation, the GP fitted on them, the generator after them)
    for `points` random decisions of problem `name` (seed 0)."""
    import torch

    from wdrbo_dist.models.gp import fit_gp
    from wdrbo_dist.problems import make_problem

    problem = make_problem(name)
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(points, problem.dim_x, generator=generator, dtype=torch.float64)
    observed = problem.observe(x, generator)
    model, _ = fit_gp(torch.cat([x, observed.context], -1), observed.y, generator)
    return problem, x, observed, model, generator


def accuracy(problems: list[str], points: int = 99, contexts: int = 512, candidates: int = 200) -> None:
    """Posterior variances at `candidates` decisions (half near the data, half uniform) x
    `contexts` KDE samples of a GP fitted on `points` random observations, by each rank cut and
    by V = I, against `GaussianProcess.posterior` (a triangular solve per pair): the largest
    differences."""
    import torch

    from wdrbo_dist.acquisition.kde import kde_samples
    from wdrbo_dist.models.gp import VARIANCE_FLOOR, numerical_basis, rbf

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
    allowance (`Region.residual_max`)."""
    import torch

    from wdrbo_dist.models.gp import GaussianProcess, rbf

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
            model = GaussianProcess(fitted.train_x, fitted.train_y, fitted.lengthscale, fitted.noise,
                                    fitted.mean_constant, context_basis=True, region_tolerance=tolerance)
            found = model.region_basis(box)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, problems=["ackley"], seeds=6, algorithms=["erbo", "wdrbo", "sbo-kde"])
    parser.add_argument("--compare", choices=list(COMPARISONS), default="route", help="which two routes to run")
    parser.add_argument("--fidelity", default="paper", choices=["paper", "reference"])
    parser.add_argument("--accuracy", action="store_true", help="the variances' errors instead of runs (--problems)")
    parser.add_argument("--region", action="store_true",
                        help="the fresh contexts' projection residuals instead of runs (--problems)")
    args = parser.parse_args()
    if args.accuracy:
        accuracy(args.problems)
        return
    if args.region:
        region(args.problems)
        return
    compare(args.algorithms, args.problems, COMPARISONS[args.compare], args.seeds, args.evaluations, args.fidelity,
            args.workers, first_seed=args.first_seed)


if __name__ == "__main__":
    main()

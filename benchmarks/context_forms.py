"""The GP's two routes for the variance at (candidate, context) pairs in an Adam step (option
`context_forms`, models/gp.py): a quadratic form [n, n] per candidate with a closed-form
gradient (`quadratic_forms`, the paper profile's default since version 0.8.0) or the n(n+1)/2
pair products and autograd (0.7.0's records; the reference profile's default). Same method?
At what speed?

`--step` times one acquisition call of 10 candidates, forward and backward, on both routes
for a grid of data sizes n and context counts N (random data, one thread): where the forms
route pays, which sets FORMS_MIN_POINTS. `--step --wdrbo` times WDRBO's call instead: N = n
observed contexts and 100 Lipschitz points whose context gradients are taken outside autograd
(on the forms route since version 0.9.0). Without it, whole runs on the same seeds, paired
(`paired_variants.py`): the routes agree to ~1e-15 relative, enough for one seed's
trajectories to part after a few BO steps, so they are compared over seeds.

    .venv/bin/python benchmarks/context_forms.py --step
    .venv/bin/python benchmarks/context_forms.py --step --wdrbo
    .venv/bin/python benchmarks/context_forms.py --problems modified-branin portfolio-uniform --seeds 6
"""

from __future__ import annotations

import argparse
import time

from paired_variants import add_run_arguments, compare

ROUTES: dict[str, dict[str, object]] = {"pairs": {"context_forms": False}, "forms": {"context_forms": True}}
AFFECTED = ["erbo", "wdrbo", "sbo-kde", "drbo-kde", "drbo-mmd", "drbo-mmd-minimax", "stableopt"]


def step_times(
    sizes: list[int], contexts: list[int] | None, candidates: int = 10, repeats: int = 20, gradient_points: int = 0
) -> None:
    """ms per forward + backward call of `ucb_from_features` on each route, for data of n points
    (d_x = 2, d_c = 2) and N contexts (`contexts` None: N = n, WDRBO's observed contexts), with context gradients at `gradient_points`
    points taken outside autograd (WDRBO's detach_gradient); the forms route's share of the
    pairs route's time."""
    import torch

    from wdrbo_dist.models import gp

    gp.FORMS_MIN_POINTS = 0  # the forms route at every n, to find where it pays
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
                model = gp.GaussianProcess(train, y, lengthscale, 1e-3, 0.0, context_forms=forms)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step", action="store_true", help="time one call per route over a grid of n and N")
    parser.add_argument("--wdrbo", action="store_true", help="with --step: WDRBO's call (N = n, 100 Lipschitz points)")
    add_run_arguments(parser, problems=["modified-branin"], seeds=6, algorithms=AFFECTED)
    args = parser.parse_args()
    if args.wdrbo and not args.step:
        parser.error("--wdrbo times WDRBO's call and goes with --step")
    if args.step and args.wdrbo:
        step_times([30, 40, 48, 60, 80, 99], None, gradient_points=100)
        return
    if args.step:
        step_times([30, 40, 48, 60, 80, 99], [100, 512, 1024, 2048])
        return
    compare(args.algorithms, args.problems, ROUTES, args.seeds, args.evaluations, "paper", args.workers,
            first_seed=args.first_seed)


if __name__ == "__main__":
    main()

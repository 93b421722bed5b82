"""What 0.17.0's kernels cost against what they replaced, each alone: the scrambled Sobol draw
(torch's engine built per draw -> `acquisition/sobol.py`), the grid Gram matrix (torch's
`0.5 * (k + k.T)` -> `mmd_common.context_gram`), and the kernel vectors of 1,024 fresh contexts
(`_fresh_vectors` with libm's exp -> with `exp_in_place`, option `fresh_exp`).

One thread; the two sides alternate, best of 7 repeats of `--calls` calls each, so that the
machine's drift hits both alike. Inside a run the Sobol draw costs about twice its time alone
(caches cold between the kernels): 0.28 -> 0.067 ms a draw in a StableOpt run (README, 0.17.0).

    .venv/bin/python benchmarks/kernel_parts.py
    .venv/bin/python benchmarks/kernel_parts.py --n 60
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from paired_variants import count  # sets one thread per process before torch is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402

from wdrbo_dist.allocator import keep_freed_memory  # noqa: E402

keep_freed_memory()

from wdrbo_dist.acquisition.mmd_common import context_gram  # noqa: E402
from wdrbo_dist.acquisition.sobol import draw_seed, scrambled_sobol  # noqa: E402
from wdrbo_dist.models import compiled_ucb  # noqa: E402
from wdrbo_dist.models.gp import rbf  # noqa: E402


def engine_draw(n: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    engine = torch.quasirandom.SobolEngine(dimension=dim, scramble=True, seed=draw_seed(generator))
    return engine.draw(n, dtype=torch.float64)


def torch_gram(grid: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():  # rbf's differentiable route: torch's passes, not the in-place ones
        k = rbf(grid.clone().requires_grad_(), grid, lengthscale).detach()
    return 0.5 * (k + k.T)


def pairs(n: int) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """{label: (before, after)}."""
    generator = torch.Generator().manual_seed(0)
    grid = torch.linspace(-2.0, 2.0, 1024, dtype=torch.float64).unsqueeze(-1)
    lengthscale = torch.tensor([0.6], dtype=torch.float64)
    train = np.random.default_rng(0).uniform(0.0, 1.0, (n, 3))
    contexts = np.random.default_rng(1).uniform(0.2, 0.7, (1024, 1))
    lengths = np.array([0.2, 0.2, 0.3])
    no_region = np.empty((n, 0))
    return {
        "sobol draw, 1024 x 1": (lambda: engine_draw(1024, 1, generator), lambda: scrambled_sobol(1024, 1, generator)),
        "sobol draw, 1024 x 2": (lambda: engine_draw(1024, 2, generator), lambda: scrambled_sobol(1024, 2, generator)),
        "gram matrix, 1024 points": (lambda: torch_gram(grid, lengthscale), lambda: context_gram(grid, lengthscale)),
        f"fresh vectors, 1024 x n={n}": (
            lambda: compiled_ucb._fresh_vectors(contexts, train, lengths, no_region, 1e-11, False),
            lambda: compiled_ucb._fresh_vectors(contexts, train, lengths, no_region, 1e-11, True)),
    }


def best_ms(before: Callable[[], object], after: Callable[[], object], repeats: int, calls: int) -> tuple[float, float]:
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for side, call in enumerate((before, after)):
            call()
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[side] = min(best[side], (time.perf_counter() - start) / calls * 1e3)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=count, default=99, help="training points for the fresh vectors")
    parser.add_argument("--calls", type=count, default=100, help="calls per repeat")
    args = parser.parse_args()
    print(f"ms per call, one thread, best of 7 x {args.calls}: before -> after")
    for label, (before, after) in pairs(args.n).items():
        old, new = best_ms(before, after, repeats=7, calls=args.calls)
        print(f"{label:<28} {old:8.3f} -> {new:7.3f}  ({new / old:.2f}x)")


if __name__ == "__main__":
    main()

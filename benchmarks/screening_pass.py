"""What one screening-pass call costs: the UCB at 512 candidates x N contexts without autograd,
finished by torch's elementwise passes or by the compiled ones (`GaussianProcess.compiled_tail`,
the same bits), for the context sets the algorithms screen: ERBO's n observed contexts, SBO-KDE's
512 KDE samples, the minimax's 1,024 grid points, StableOpt's 1,024 fresh Sobol contexts.

A GP on n random points in [0, 1]^3 (two decision dimensions, one context dimension), one
thread; the two routes alternate, best of 7 repeats of 20 calls each, so that the machine's
drift hits both alike.

    .venv/bin/python benchmarks/screening_pass.py            # n = 60
    .venv/bin/python benchmarks/screening_pass.py --n 99
"""

from __future__ import annotations

import argparse
import time

from paired_variants import count  # sets one thread per process before torch is imported

import torch  # noqa: E402

from wdrbo_dist.allocator import keep_freed_memory  # noqa: E402

keep_freed_memory()

from wdrbo_dist.acquisition.stableopt import MinimumUCB  # noqa: E402
from wdrbo_dist.models.gp import GaussianProcess  # noqa: E402


def screening_calls(n: int) -> dict:
    """{label: call} for one 512-candidate screening call of each kind of context set."""
    generator = torch.Generator().manual_seed(0)
    train = torch.rand(n, 3, generator=generator, dtype=torch.float64)
    model = GaussianProcess(train, torch.randn(n, generator=generator, dtype=torch.float64),
                            torch.tensor([0.2, 0.2, 0.3], dtype=torch.float64), 1e-3, 0.1, context_basis=True)
    x = torch.rand(512, 2, generator=generator, dtype=torch.float64)
    fixed = {
        f"erbo, {n} contexts": train[:, 2:],
        "sbo-kde, 512 samples": torch.rand(512, 1, generator=generator, dtype=torch.float64),
        "minimax, 1024 grid": torch.linspace(0, 1, 1024, dtype=torch.float64).unsqueeze(-1),
    }
    calls = {label: (lambda f=model.context_features(c): model.ucb_from_features(x, f, 1.5)) for label, c in fixed.items()}
    box = torch.tensor([[0.2], [0.7]], dtype=torch.float64)
    stableopt = MinimumUCB(model, 1.5, box, 1024, torch.Generator().manual_seed(1), compiled=True)
    calls["stableopt, 1024 fresh"] = lambda: stableopt(x)
    return calls


def best_ms(call, repeats: int, calls: int) -> dict[bool, float]:
    best = {False: float("inf"), True: float("inf")}
    with torch.no_grad():
        for _ in range(repeats):
            for compiled in (False, True):
                GaussianProcess.compiled_tail = compiled
                call()
                start = time.perf_counter()
                for _ in range(calls):
                    call()
                best[compiled] = min(best[compiled], (time.perf_counter() - start) / calls * 1e3)
    GaussianProcess.compiled_tail = True
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=count, default=60, help="training points of the GP")
    args = parser.parse_args()
    print(f"ms per 512-candidate screening call, n = {args.n}, one thread: torch's passes -> compiled")
    for label, call in screening_calls(args.n).items():
        best = best_ms(call, repeats=7, calls=20)
        print(f"{label:<24} {best[False]:7.2f} -> {best[True]:6.2f}  ({best[True] / best[False]:.2f}x)")


if __name__ == "__main__":
    main()

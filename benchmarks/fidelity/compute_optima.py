"""Recompute the exact optimum of every registered problem, max_x E_{P*}[f(x, .)], on the
package's own QMC rule (method §4), and print the constants hard-coded in
wdrbo_dist/problems/*.py.

Method per problem: a dense grid or many quasi-random starts, then multi-start L-BFGS-B
(autograd gradients of `expected_value`) or bounded Brent in 1-D; closed forms where they exist
(Ackley's pointwise argmax, the Newsvendor median, the toy's stationarity equation).

Usage: .venv/bin/python benchmarks/fidelity/compute_optima.py   (about two minutes on one thread)
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from scipy.optimize import brentq, minimize, minimize_scalar

from wdrbo_dist.problems import make_problem
from wdrbo_dist.problems.base import DTYPE, Problem, sobol_points
from wdrbo_dist.problems.branin import branin
from wdrbo_dist.problems.newsvendor import BURR_D
from wdrbo_dist.problems.toy import A_STAR


def value(problem: Problem, x: np.ndarray | list[float]) -> float:
    return float(problem.expected_value(torch.as_tensor(np.asarray(x, dtype=np.float64)).reshape(1, -1))[0])


def batch_values(problem: Problem, xs: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    return torch.cat([problem.expected_value(part) for part in xs.split(chunk)])


def lbfgsb(problem: Problem, starts: torch.Tensor) -> tuple[np.ndarray, float]:
    """Multi-start L-BFGS-B on -E, inside the decision bounds; the best end point."""
    lo, hi = problem.decision_bounds.numpy()

    def negative(z: np.ndarray) -> tuple[float, np.ndarray]:
        x = torch.tensor(z, dtype=DTYPE).reshape(1, -1).requires_grad_(True)
        v = problem.expected_value(x).sum()
        (grad,) = torch.autograd.grad(v, x)
        return -float(v.detach()), -grad.reshape(-1).numpy()

    best_x, best_v = None, -math.inf
    for start in starts.numpy():
        res = minimize(
            negative, start, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
            options={"ftol": 1e-16, "gtol": 1e-12, "maxiter": 2000},
        )
        v = value(problem, res.x)
        if v > best_v:
            best_x, best_v = res.x, v
    assert best_x is not None
    return best_x, best_v


def grid_then_lbfgsb(problem: Problem, candidates: torch.Tensor, top: int) -> tuple[np.ndarray, float]:
    values = batch_values(problem, candidates)
    return lbfgsb(problem, candidates[values.argsort(descending=True)[:top]])


def brent_1d(problem: Problem, grid_size: int = 2001) -> tuple[np.ndarray, float]:
    """Dense grid, then bounded Brent around the best grid point."""
    lo, hi = (float(b) for b in problem.decision_bounds[:, 0])
    grid = torch.linspace(lo, hi, grid_size, dtype=DTYPE).unsqueeze(-1)
    i = int(batch_values(problem, grid, chunk=64).argmax())
    h = (hi - lo) / (grid_size - 1)
    a, b = max(lo, float(grid[i]) - h), min(hi, float(grid[i]) + h)
    res = minimize_scalar(lambda t: -value(problem, [t]), bounds=(a, b), method="bounded",
                          options={"xatol": 1e-13})
    return np.array([res.x]), value(problem, [res.x])


def ackley() -> tuple[np.ndarray, float]:
    p = make_problem("ackley")
    x = np.array([0.5, 0.5])
    # Check the pointwise argument on a local grid and on quasi-random points.
    local = 0.5 + torch.cartesian_prod(*[torch.linspace(-0.01, 0.01, 41, dtype=DTYPE)] * 2)
    best = value(p, x) + 1e-12  # batches sum in another order: rounding only
    assert float(batch_values(p, local, chunk=64).max()) <= best
    assert float(batch_values(p, sobol_points(4096, 2), chunk=64).max()) <= best
    return x, value(p, x)


def hartmann() -> tuple[np.ndarray, float]:
    return grid_then_lbfgsb(make_problem("hartmann"), sobol_points(2**16, 5), top=32)


def branin_opt() -> tuple[np.ndarray, float]:
    """Factorised 1-D grids (E is nearly E[sqrt B1](x1) E[sqrt B2](x2)) give the starts."""
    p = make_problem("modified-branin")
    nodes = p.qmc_nodes()  # [N, 2]; each marginal is the 1-D rule
    g = torch.linspace(0, 1, 2001, dtype=DTYPE)
    e1 = torch.stack([torch.sqrt(branin(15 * t - 5, 15 * nodes[:, 0])).mean() for t in g])
    e2 = torch.stack([torch.sqrt(branin(15 * nodes[:, 1] - 5, 15 * t)).mean() for t in g])
    i1, i2 = e1.argsort()[:4], e2.argsort()[:4]
    starts = torch.cartesian_prod(g[i1], g[i2])
    return lbfgsb(p, starts)


def newsvendor() -> tuple[np.ndarray, float]:
    p = make_problem("newsvendor")
    median = math.sqrt(2 ** (1 / BURR_D) - 1)
    grid = torch.linspace(0, 1, 20001, dtype=DTYPE).unsqueeze(-1)
    assert float(batch_values(p, grid, chunk=64).max()) <= value(p, [median]) + 1e-12
    return np.array([median]), value(p, [median])


def portfolio(name: str) -> tuple[np.ndarray, float]:
    g = torch.linspace(0, 1, 41, dtype=DTYPE)
    return grid_then_lbfgsb(make_problem(name), torch.cartesian_prod(g, g, g), top=30)


def toy() -> tuple[np.ndarray, float]:
    def stationarity(t: float) -> float:  # d/dt of 1 - a*/(t + 0.2) - sqrt(t + 0.05), t = |x|
        return A_STAR / (t + 0.2) ** 2 - 0.5 / math.sqrt(t + 0.05)

    t = brentq(stationarity, 0.0, 1.0, xtol=1e-15, rtol=1e-15)
    return np.array([t]), value(make_problem("toy-general"), [t])


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    results = {
        "ackley": ackley(),
        "hartmann": hartmann(),
        "modified-branin": branin_opt(),
        "newsvendor": newsvendor(),
        "portfolio-uniform": portfolio("portfolio-uniform"),
        "portfolio-normal": portfolio("portfolio-normal"),
        "three-hump-camel": brent_1d(make_problem("three-hump-camel")),
        "six-hump-camel (paper: observation scaling)": brent_1d(make_problem("six-hump-camel", "paper")),
        "six-hump-camel (reference: truth scaling)": brent_1d(make_problem("six-hump-camel", "reference")),
        "toy-general": toy(),
    }
    for name, (x, v) in results.items():
        print(f"{name}:\n    optimal_x = {tuple(float(t) for t in x)!r}\n    optimal_value = {v!r}")


if __name__ == "__main__":
    main()

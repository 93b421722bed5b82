"""Portfolio problems (method §4.5, §4.6): d_x = 3, d_c = 2, a fixed GP posterior mean as the simulator.

The surrogate s(u), u = [x1, x2, x3, c1, c2], is the posterior mean of an RBF GP fitted to 3,000
simulator runs (package data). It is computed in float64 with one Cholesky solve per process
(the published code uses gpytorch's CG in float32; the two agree to about 1e-3).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.problems.base import DTYPE, Fidelity, sobol_points
from wdrbo_dist.problems.common import (
    MAX_PAIRS,
    ClampedNormalProblem,
    DeviceCache,
    QMCProblem,
    as_batch,
    concat_inputs,
)


@dataclass(frozen=True)
class Surrogate:
    """The GP posterior mean s(u) = outcome_mean + outcome_std (m + k(u, X) alpha)."""

    scaled_inputs: Tensor  # [n, 5] training inputs divided by the lengthscales
    inv_lengthscale: Tensor  # [5]
    alpha: Tensor  # [n] = (K + noise I)^-1 (y_std - m)
    constant_mean: float
    outcome_mean: float
    outcome_std: float

    def to(self, device: torch.device) -> "Surrogate":
        return Surrogate(
            self.scaled_inputs.to(device),
            self.inv_lengthscale.to(device),
            self.alpha.to(device),
            self.constant_mean,
            self.outcome_mean,
            self.outcome_std,
        )


def _sq_dist(a: Tensor, b: Tensor) -> Tensor:
    """Squared distances [m, n] between rows of a [m, d] and b [n, d], from exact differences
    (no |a|^2 + |b|^2 - 2ab cancellation)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist").square()


@functools.lru_cache(maxsize=1)
def surrogate() -> Surrogate:
    """Load the package data and solve (K + noise I) alpha = y_std - m once per process (CPU)."""
    data = importlib.resources.files("wdrbo_dist") / "data"
    with (data / "portfolio_evals.csv").open() as fh:
        evals = torch.from_numpy(np.loadtxt(fh, delimiter=",", skiprows=1, dtype=np.float64))
    hyper = json.loads((data / "portfolio_surrogate.json").read_text())
    inv_ls = 1.0 / torch.tensor(hyper["lengthscales"], dtype=DTYPE)
    xs = evals[:, :5] * inv_ls
    y_std = (evals[:, 5] - hyper["outcome_mean"]) / hyper["outcome_std"]
    k = torch.exp(-0.5 * _sq_dist(xs, xs))
    k.diagonal().add_(hyper["noise_variance"])
    chol = torch.linalg.cholesky(k)
    alpha = torch.cholesky_solve((y_std - hyper["constant_mean"]).unsqueeze(-1), chol).squeeze(-1)
    return Surrogate(xs, inv_ls, alpha, hyper["constant_mean"], hyper["outcome_mean"], hyper["outcome_std"])


_SURROGATE: DeviceCache[Surrogate] = DeviceCache(surrogate)


def surrogate_mean(u: Tensor) -> Tensor:
    """s(u) for u [..., 5] in [0, 1]^5 -> [...] (float64, on u's device)."""
    u = u.to(DTYPE)
    s = _SURROGATE.get(u.device)
    flat = u.reshape(-1, 5) * s.inv_lengthscale
    rows = max(1, MAX_PAIRS // s.alpha.shape[0])
    parts = [torch.exp(-0.5 * _sq_dist(chunk, s.scaled_inputs)) @ s.alpha for chunk in flat.split(rows)]
    mean = torch.cat(parts) if parts else flat.new_zeros(0)
    return (s.outcome_mean + s.outcome_std * (s.constant_mean + mean)).reshape(u.shape[:-1])


class _Portfolio(QMCProblem):
    """f(x, c) = -s([x, c]) (the simulated return, maximised); 2,048 2-D Sobol nodes for the truth."""

    dim_x: ClassVar[int] = 3
    dim_c: ClassVar[int] = 2
    qmc_size: ClassVar[int] = 2_048

    def __init__(self, fidelity: Fidelity = "paper") -> None:
        super().__init__(fidelity)
        self._weights: DeviceCache[Tensor] = DeviceCache(self._build_weights)

    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        return -surrogate_mean(concat_inputs(x, c))

    def _build_weights(self) -> Tensor:
        """alpha_n * mean_k exp(-0.5 |(c_k - X_n,c) / l_c|^2): the context half of the kernel."""
        s = surrogate()
        c = self.qmc_nodes() * s.inv_lengthscale[3:]
        return s.alpha * torch.exp(-0.5 * _sq_dist(c, s.scaled_inputs[:, 3:])).mean(0)

    def expected_value(self, x: Tensor) -> Tensor:
        """The QMC rule rearranged: the RBF kernel factorises over (x, c), so the node average
        moves inside the posterior-mean sum and one x costs one 3,000-term dot product."""
        x = as_batch(x, self.dim_x)
        s = _SURROGATE.get(x.device)
        w = self._weights.get(x.device)
        xs = x * s.inv_lengthscale[:3]
        rows = max(1, MAX_PAIRS // w.shape[0])
        parts = [torch.exp(-0.5 * _sq_dist(chunk, s.scaled_inputs[:, :3])) @ w for chunk in xs.split(rows)]
        mean = torch.cat(parts) if parts else xs.new_zeros(0)
        return -(s.outcome_mean + s.outcome_std * (s.constant_mean + mean))


class PortfolioUniform(_Portfolio):
    """The code's `portfolio_optimization`: c ~ U[0, 1]^2, truth on the raw Sobol points."""

    name: ClassVar[str] = "portfolio-uniform"
    display_name: ClassVar[str] = "Portfolio (Uniform)"

    # Computed by benchmarks/fidelity/compute_optima.py (41^3 grid, then L-BFGS-B on this QMC rule).
    optimal_x: tuple[float, ...] = (0.0, 1.0, 0.5563740527794453)
    optimal_value: float = 18.08479127913946
    reference_optimal_value: float = 19.0

    def sample_context(self, n: int, generator: torch.Generator) -> Tensor:
        return torch.rand(n, self.dim_c, generator=generator, dtype=DTYPE)

    def _build_qmc_nodes(self) -> Tensor:
        return sobol_points(self.qmc_size, self.dim_c)


class PortfolioNormal(_Portfolio, ClampedNormalProblem):
    """The code's `portfolio_normal_optimization`: c ~ clamp N(0.5, 0.2^2) per dimension."""

    name: ClassVar[str] = "portfolio-normal"
    display_name: ClassVar[str] = "Portfolio (Normal)"

    # Computed by benchmarks/fidelity/compute_optima.py (41^3 grid, then L-BFGS-B on this QMC rule).
    optimal_x: tuple[float, ...] = (0.0, 1.0, 0.09615949919797814)
    optimal_value: float = 19.748832030647677
    reference_optimal_value: float = 21.0

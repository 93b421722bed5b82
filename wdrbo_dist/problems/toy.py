"""The paper's general-setting toy problem (method §4.9, method §9.5), a reconstruction.

f(x, c) = 1 - |c - 0.5| / (|x| + 0.2) - sqrt(|x| + 0.05), x in [-1, 1]. The environment draws
c ~ P* = N(0.6, 0.2^2), not clipped; the learner is given the centre N(0.5, 0.1^2) and radius 0.1.
The truth is exact: E|c - 0.5| under P* is a folded-normal mean.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.problems.base import DTYPE, CentreDistribution, Problem
from wdrbo_dist.problems.common import as_batch

TRUE_MEAN, TRUE_STD = 0.6, 0.2
CENTRE_MEAN, CENTRE_STD, RADIUS = 0.5, 0.1, 0.1
QUADRATURE_NODES = 64


def folded_mean(mu: float, sigma: float) -> float:
    """E|Z| for Z ~ N(mu, sigma^2)."""
    return sigma * math.sqrt(2 / math.pi) * math.exp(-(mu**2) / (2 * sigma**2)) + mu * math.erf(
        mu / (sigma * math.sqrt(2))
    )


# a* = E|c - 0.5| under P*; a_hat the same under the centre P-hat.
A_STAR = folded_mean(TRUE_MEAN - 0.5, TRUE_STD)
A_CENTRE = folded_mean(CENTRE_MEAN - 0.5, CENTRE_STD)


class ToyGeneral(Problem):
    """The general-setting toy: WDRBO with a given centre and radius against a shifted P*."""

    name: ClassVar[str] = "toy-general"
    display_name: ClassVar[str] = "General setting (toy)"
    dim_x: ClassVar[int] = 1
    dim_c: ClassVar[int] = 1

    # Computed by benchmarks/fidelity/compute_optima.py: the root in t = |x| of a*/(t+0.2)^2 = 1/(2 sqrt(t+0.05))
    # (Brent, xtol 1e-15); f is even in x, the positive root is returned.
    optimal_x: tuple[float, ...] = (0.23874794321521775,)
    optimal_value: float = 0.05439779480125018
    reference_optimal_value: float = 0.05439779480125018  # no published constant: the exact value

    @property
    def decision_bounds(self) -> Tensor:
        return torch.tensor([[-1.0], [1.0]], dtype=DTYPE)

    def sample_context(self, n: int, generator: torch.Generator) -> Tensor:
        return TRUE_MEAN + TRUE_STD * torch.randn(n, 1, generator=generator, dtype=DTYPE)

    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        t = x.to(DTYPE)[..., 0].abs()
        c = c.to(device=t.device, dtype=DTYPE)[..., 0]
        return 1 - (c - 0.5).abs() / (t + 0.2) - torch.sqrt(t + 0.05)

    def expected_value(self, x: Tensor) -> Tensor:
        t = as_batch(x, self.dim_x)[:, 0].abs()
        return 1 - A_STAR / (t + 0.2) - torch.sqrt(t + 0.05)

    def centre_distribution(self) -> CentreDistribution:
        """N(0.5, 0.1^2) by 64-point Gauss-Hermite quadrature (probabilists' weight), radius 0.1."""
        z, w = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
        nodes = torch.from_numpy(CENTRE_MEAN + CENTRE_STD * z).to(DTYPE).unsqueeze(-1)
        weights = torch.from_numpy(w / w.sum()).to(DTYPE)
        return CentreDistribution(nodes=nodes, weights=weights, radius=RADIUS)

    def expected_value_under_centre(self, x: Tensor) -> Tensor:
        """E_{c~P-hat}[f(x, c)] in closed form (the quadrature of `centre_distribution` is for
        the smooth GP surrogate; f's kink at c = 0.5 would cost it ~5e-4 here)."""
        t = as_batch(x, self.dim_x)[:, 0].abs()
        return 1 - A_CENTRE / (t + 0.2) - torch.sqrt(t + 0.05)

    def landscape(self, grid: int = 401) -> dict[str, np.ndarray | float]:
        """f's expectations on an x grid: under the centre P̂, under P*, and the robust objective.

        The robust objective E_P̂ f(x) − ε·L(x) uses L(x), the Lipschitz constant of f(x, ·) in c,
        estimated by finite differences over the contexts P̂ and P* put mass on: it is the quantity
        WDRBO's acquisition bounds, computed with the true f instead of the UCB.
        """
        centre = self.centre_distribution()
        lo, hi = (float(v) for v in self.decision_bounds[:, 0])
        x = torch.linspace(lo, hi, grid, dtype=torch.float64)
        nodes, weights, radius = centre.nodes, centre.weights, float(centre.radius)
        e_centre = self.expected_value_under_centre(x[:, None])  # exact, not the quadrature
        e_true = self.expected_value(x[:, None])
        # The contexts that matter: the central 99.8% of P* (sampled) and of P̂ (its quadrature).
        draws = self.sample_context(4096, torch.Generator().manual_seed(0))[:, 0]
        order = torch.argsort(nodes[:, 0])
        cdf = torch.cumsum(weights[order], 0)
        sorted_nodes = nodes[order, 0]
        centre_lo = sorted_nodes[int(torch.searchsorted(cdf, torch.tensor(0.001, dtype=cdf.dtype)))]
        centre_hi = sorted_nodes[min(len(cdf) - 1, int(torch.searchsorted(cdf, torch.tensor(0.999, dtype=cdf.dtype))))]
        c_lo = float(min(centre_lo, torch.quantile(draws, 0.001)))
        c_hi = float(max(centre_hi, torch.quantile(draws, 0.999)))
        c = torch.linspace(c_lo, c_hi, 241, dtype=torch.float64)
        f_xc = self.evaluate(x[:, None, None], c[None, :, None])  # [grid, 241]
        lipschitz = (f_xc.diff(dim=1).abs() / c.diff()[None, :]).max(dim=1).values
        return {
            "x": x.numpy(), "c": c.numpy(), "f": f_xc.numpy().T, "e_centre": e_centre.numpy(),
            "e_true": e_true.numpy(), "robust": (e_centre - radius * lipschitz).numpy(), "radius": radius,
            "optimal_value": float(self.optimal_value),
        }

"""Newsvendor, the code's `Continuous_Vendor` (method §4.4): d_x = 1, d_c = 1, Burr XII demand."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from wdrbo_dist.problems.base import DTYPE, Observation, sobol_points
from wdrbo_dist.problems.common import QMCProblem

BURR_C, BURR_D = 2.0, 20.0
PRICE, COST, SALVAGE = 9.0, 5.0, 1.0


def burr12_icdf(v: Tensor) -> Tensor:
    """F^-1(v) = ((1 - v)^(-1/d) - 1)^(1/c) of Burr XII(c = 2, d = 20), stable near v = 0."""
    return torch.expm1(-torch.log1p(-v) / BURR_D).pow(1 / BURR_C)


class Newsvendor(QMCProblem):
    """Profit 9 min(c, x) - 5 x + max(0, x - c) of an order x against the clamped demand c.

    Quirk of the code (method §8.17): the learner is shown the unclamped demand, f uses the
    clamped one. For x in [0, 1] clamping at 1 does not change f, so this is cosmetic.
    """

    name: ClassVar[str] = "newsvendor"
    display_name: ClassVar[str] = "Newsvendor"
    dim_x: ClassVar[int] = 1
    dim_c: ClassVar[int] = 1

    # Closed form, checked by benchmarks/fidelity/compute_optima.py: dE/dx = 8 P(c > x) - 4, so the QMC
    # rule is maximal (and flat) between its two middle nodes F^-1(1/2 - 2^-16) and F^-1(1/2);
    # the demand median F^-1(1/2) = (2^(1/20) - 1)^(1/2) is an argmax. Value = the rule there.
    optimal_x: tuple[float, ...] = (math.sqrt(2 ** (1 / BURR_D) - 1),)
    optimal_value: float = 0.4639315890134327
    reference_optimal_value: float = 0.464

    def sample_context(self, n: int, generator: torch.Generator) -> Tensor:
        """Burr XII demand by the inverse CDF, unclamped (as the learner observes it)."""
        return burr12_icdf(torch.rand(n, 1, generator=generator, dtype=DTYPE))

    def observe(self, x: Tensor, generator: torch.Generator) -> Observation:
        """y from the clamped demand, the context as drawn (unclamped), like the code."""
        demand = self.sample_context(x.shape[0], generator)
        return Observation(y=self.evaluate(x, demand.clamp(0.0, 1.0)), context=demand)

    def _build_qmc_nodes(self) -> Tensor:
        return burr12_icdf(sobol_points(self.qmc_size, 1)).clamp_(0.0, 1.0)

    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        x = x.to(DTYPE)[..., 0]
        c = c.to(device=x.device, dtype=DTYPE)[..., 0].clamp(0.0, 1.0)
        return PRICE * torch.minimum(c, x) - COST * x + SALVAGE * torch.clamp(x - c, min=0.0)

"""Modified Branin (method §4.3): d_x = 2, d_c = 2, a product of two Branin copies."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from wdrbo_dist.problems.base import DTYPE
from wdrbo_dist.problems.common import ClampedNormalProblem

_B = 5.1 / (4 * math.pi**2)
_C = 5 / math.pi
_S = 10 * (1 - 1 / (8 * math.pi))


def branin(a: Tensor, b: Tensor) -> Tensor:
    """The Branin function B(a, b) on its physical domain (a in [-5, 10], b in [0, 15])."""
    return (b - _B * a.square() + _C * a - 6).square() + _S * torch.cos(a) + 10


class ModifiedBranin(ClampedNormalProblem):
    """f = -sqrt(B(15 x1 - 5, 15 c1) * B(15 c2 - 5, 15 x2)); c_i ~ clamp N(0.5, 0.2^2) independently.

    The first copy takes its `a` from x1 and `b` from c1; the second `a` from c2 and `b` from
    x2 (the arrangement of the published code), while the GP input order is [x1, x2, c1, c2].
    The truth is the QMC rule on the 2-D Sobol sequence (not the product of 1-D rules).
    """

    name: ClassVar[str] = "modified-branin"
    display_name: ClassVar[str] = "Modified Branin"
    dim_x: ClassVar[int] = 2
    dim_c: ClassVar[int] = 2

    # Computed by benchmarks/fidelity/compute_optima.py (factorised grid, then L-BFGS-B on this QMC rule).
    optimal_x: tuple[float, ...] = (0.18524204741989356, 0.2011902455755915)
    optimal_value: float = -16.064775362065536
    reference_optimal_value: float = -16.0649

    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        x, c = x.to(DTYPE), c.to(device=x.device, dtype=DTYPE)
        first = branin(15 * x[..., 0] - 5, 15 * c[..., 0])
        second = branin(15 * c[..., 1] - 5, 15 * x[..., 1])
        return -torch.sqrt(first * second)

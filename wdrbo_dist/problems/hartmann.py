"""Hartmann-6 (method §4.2): d_x = 5, d_c = 1, the context is the last coordinate."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from wdrbo_dist.problems.base import DTYPE, Fidelity
from wdrbo_dist.problems.common import ClampedNormalProblem, DeviceCache, as_batch, concat_inputs

_ALPHA = (1.0, 1.2, 3.0, 3.2)
_A = (
    (10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
    (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
    (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
    (17.0, 8.0, 0.05, 10.0, 0.1, 14.0),
)
_P = (
    (1312, 1696, 5569, 124, 8283, 5886),
    (2329, 4135, 8307, 3736, 1004, 9991),
    (2348, 1451, 3522, 2883, 3047, 6650),
    (4047, 8828, 8732, 5743, 1091, 381),
)


def _constants() -> tuple[Tensor, Tensor, Tensor]:
    """alpha [4], A [4, 6], P [4, 6] as float64."""
    alpha = torch.tensor(_ALPHA, dtype=DTYPE)
    a = torch.tensor(_A, dtype=DTYPE)
    p = torch.tensor(_P, dtype=DTYPE) * 1e-4
    return alpha, a, p


class Hartmann(ClampedNormalProblem):
    """f = +H(u), u = [x1..x5, c], c ~ clamp N(0.5, 0.2^2)."""

    name: ClassVar[str] = "hartmann"
    display_name: ClassVar[str] = "Hartmann"
    dim_x: ClassVar[int] = 5
    dim_c: ClassVar[int] = 1

    # Computed by benchmarks/fidelity/compute_optima.py (multi-start L-BFGS-B on this QMC rule).
    optimal_x: tuple[float, ...] = (
        0.19832202187663514,
        0.15166963935880157,
        0.4850129895576152,
        0.2732864646117279,
        0.3129284888655114,
    )
    optimal_value: float = 2.31690744718427
    reference_optimal_value: float = 2.3165

    def __init__(self, fidelity: Fidelity = "paper") -> None:
        super().__init__(fidelity)
        self._const: DeviceCache[tuple[Tensor, Tensor, Tensor]] = DeviceCache(_constants)
        self._context_factor: DeviceCache[Tensor] = DeviceCache(self._build_context_factor)

    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        alpha, a, p = self._const.get(x.device)
        u = concat_inputs(x, c).unsqueeze(-2)  # [..., 1, 6]
        return (alpha * torch.exp(-(a * (u - p).square()).sum(-1))).sum(-1)

    def _build_context_factor(self) -> Tensor:
        """alpha_i * mean_k exp(-A_i6 (c_k - P_i6)^2): the context part of each exp term."""
        alpha, a, p = _constants()
        c = self.qmc_nodes()  # [N, 1]
        return alpha * torch.exp(-a[:, 5] * (c - p[:, 5]).square()).mean(0)

    def expected_value(self, x: Tensor) -> Tensor:
        """The QMC rule rearranged: each exp term factorises into an x part and a context part."""
        x = as_batch(x, self.dim_x)
        _, a, p = self._const.get(x.device)
        inner = (a[:, :5] * (x.unsqueeze(-2) - p[:, :5]).square()).sum(-1)  # [b, 4]
        return (self._context_factor.get(x.device) * torch.exp(-inner)).sum(-1)

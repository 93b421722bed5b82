"""Ackley (method §4.1): d_x = 2, d_c = 1, the code's dimensions (the paper's table says d_x = 1)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from wdrbo_dist.problems.base import Fidelity
from wdrbo_dist.problems.common import MAX_PAIRS, ClampedNormalProblem, DeviceCache, as_batch

_SCALE, _SHIFT = 65.536, 32.768  # maps [0, 1] onto [-32.768, 32.768]


class Ackley(ClampedNormalProblem):
    """f = -Ackley(65.536 u - 32.768), u = [x1, x2, c], c ~ clamp N(0.5, 0.2^2)."""

    name: ClassVar[str] = "ackley"
    display_name: ClassVar[str] = "Ackley"
    dim_x: ClassVar[int] = 2
    dim_c: ClassVar[int] = 1
    qmc_size: ClassVar[int] = 655_360  # not a power of two; the first 655,360 Sobol points

    # Computed by benchmarks/fidelity/compute_optima.py: every term of the Ackley sum is maximised at
    # z_x = 0 for each context, so x* = (0.5, 0.5) exactly; the value is the QMC rule there.
    optimal_x: tuple[float, ...] = (0.5, 0.5)
    optimal_value: float = -12.531436762860197
    reference_optimal_value: float = -12.78

    def __init__(self, fidelity: Fidelity = "paper") -> None:
        super().__init__(fidelity)
        self._terms: DeviceCache[tuple[Tensor, Tensor]] = DeviceCache(self._context_terms)

    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        zx = _SCALE * x.to(torch.float64) - _SHIFT
        zc = _SCALE * c.to(device=zx.device, dtype=torch.float64) - _SHIFT
        d = self.dim_x + self.dim_c
        sq = zx.square().sum(-1) + zc.square().sum(-1)
        cs = torch.cos(2 * math.pi * zx).sum(-1) + torch.cos(2 * math.pi * zc).sum(-1)
        return 20.0 * torch.exp(-0.2 * torch.sqrt(sq / d)) + torch.exp(cs / d) - 20.0 - math.e

    def _context_terms(self) -> tuple[Tensor, Tensor]:
        """Per node 0.04 z_c^2 / 3, and the node mean of exp(cos(2 pi z_c) / 3)."""
        zc = (_SCALE * self.qmc_nodes() - _SHIFT).squeeze(-1)
        d = self.dim_x + self.dim_c
        return zc.square() * (0.04 / d), torch.exp(torch.cos(2 * math.pi * zc) / d).mean()

    def expected_value(self, x: Tensor) -> Tensor:
        """The QMC rule rearranged: the cosine term factorises, leaving one sqrt+exp per node."""
        x = as_batch(x, self.dim_x)
        q, cos_mean = self._terms.get(x.device)
        d = self.dim_x + self.dim_c
        zx = _SCALE * x - _SHIFT
        sx = zx.square().sum(-1, keepdim=True) * (0.04 / d)  # [b, 1]
        cx = torch.cos(2 * math.pi * zx).sum(-1)  # [b]
        step = max(1, MAX_PAIRS // max(1, x.shape[0]))
        acc = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
        for start in range(0, q.shape[0], step):
            t = q[start : start + step] + sx  # [b, m]: 0.04 |z|^2 / d
            if t.requires_grad:
                t = torch.exp(-torch.sqrt(t))
            else:
                t.sqrt_().neg_().exp_()  # in place: this loop is the hot path of every BO step
            acc = acc + t.sum(-1)
        return 20.0 * acc / q.shape[0] + torch.exp(cx / d) * cos_mean - 20.0 - math.e

"""DRBO-MMD minimax approximation (method §3.7, after Tay et al. 2022): a closed form instead of a solve.

The worst case over the MMD ball is approximated in three cases from the grid UCB's minimum,
mean and spread, with the reference's bugs as options (method §8.4); the comment above
`point_mmd_squared` gives the cases, the edge cases and the gradient. An Adam step's u comes from
the compiled pair kernel (NumericalSettings.adam_pass, on the CPU).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.acquisition.options import Option
from wdrbo_dist.acquisition.base import Acquisition, Algorithm, BOState
from wdrbo_dist.acquisition.compiled import FixedContextUCB
from wdrbo_dist.acquisition.mmd.grid import (
    MMD_RADIUS_CONSTANT,
    context_gram,
    context_grid,
    empirical_pmf,
    mmd_radius,
)
from wdrbo_dist.models.gp import GaussianProcess

_TINY = 1e-24  # keeps sqrt's gradient finite where its argument vanishes


# With u the UCB on the context grid (1024 points), g = min u at j*, E the mean of u (reference:
# unweighted grid mean; paper profile: the w-weighted mean E_w[u], the expectation under the
# ball's centre), S = sqrt(N sum_j pi_j (u_j - E)^2) (pi the mean's weights; for the uniform mean
# this is the reference's sqrt(sum u^2 - N E^2)), e* = MMD(delta_{j*}, w), eps' = (g - E)/S and
# tau = (g - E)/e*:
#
#     case 1, r < eps':          E + r (tau + S) / 2   (never, as r > 0 >= eps')
#     case 2, eps' <= r <= e*:   (E + r tau + g) / 2
#     case 3, r > e*:            g
#
# The reference's control-flow bug (method §8.4) gives case-3 candidates the value 0 whenever any
# candidate of the same call is in case 2; `minimax_case3_zero_bug` reproduces it. Edge cases
# (all u equal: S = 0; w a point mass at j*: e* = 0) give finite values in both profiles (method §8.22
# is cosmetic). Gradient through u; w and K are constants of the BO step. e* costs O(1) per
# candidate: MMD(delta_j, w)^2 = K_jj - 2 (K w)_j + w^T K w for every grid point j is computed once
# per BO step (`point_mmd_squared`; the reference forms (delta - w)^T K (delta - w) per candidate).
# An Adam step's u comes from the compiled pair kernel (NumericalSettings.adam_pass, on the
# CPU), its backward pass from autograd's d(value)/du. That is zero off w's support and the
# candidates' minimisers (most of the grid), so the kernel's backward pass leaves those grid
# points out (`sparse_backward`: the same gradient to ~1e-11 relative, a shorter sum).
def point_mmd_squared(gram: Tensor, w: Tensor) -> Tensor:
    """MMD(delta_j, w)^2 [N] for every grid point j, with the grid's Gram matrix K [N, N]."""
    kw = gram @ w
    return gram.diagonal() - 2.0 * kw + w @ kw


def minimax_value(
    u: Tensor,
    w: Tensor,
    mmd_squared: Tensor,
    radius: float,
    uniform_mean: bool,
    case3_zero_bug: bool,
) -> Tensor:
    """The closed-form minimax value [b] for grid UCB values u [b, N], pmf w [N] and each grid
    point's squared MMD to w (`point_mmd_squared`) [N]."""
    return _minimax_terms(u, w, mmd_squared, radius, uniform_mean, case3_zero_bug)[0]


def minimax_value_and_weights(u: Tensor, w: Tensor, mmd_squared: Tensor,
                              radius: float) -> tuple[Tensor, Tensor] | None:
    """`minimax_value` [b] and d(value)/du [b, N] of the paper profile's closed form (the E_w
    mean, no case-3 bug), as torch's autograd forms it for an upstream gradient of 1, e* held
    fixed: case 2, value (E + r tau + g) / 2 with tau = (g - E) / e*, gives g the weight
    1/2 + r / (2 e*) and E the weight 1/2 - r / (2 e*) (spread over the grid as E's pi); case 3
    gives g the weight 1 at its minimiser. Every other path of the graph carries exact zeros.
    None where a candidate is in case 1 or a value is not finite: autograd's own route then."""
    if not math.isfinite(float(u.sum())):  # a non-finite u (or a sum that overflows): autograd's route
        return None
    value, g, j_star, mean, e_star, case1, case2, case3 = _minimax_terms(u, w, mmd_squared, radius, False, False)
    if bool(case1.any()):
        return None
    half = case2.to(u.dtype) / 2.0  # d(value2)/d(value2's sum)
    safe = torch.where(e_star > 0, e_star, torch.ones_like(e_star))
    to_gap = torch.where(e_star > 0, half * radius, torch.zeros_like(half)) / safe  # through tau = gap / e*
    to_minimum = half + to_gap + case3.to(u.dtype)
    to_mean = half - to_gap
    weights = to_mean.unsqueeze(-1) * w  # E = u @ w: the outer product
    weights.scatter_add_(-1, j_star.unsqueeze(-1), to_minimum.unsqueeze(-1))  # g = u[j*]
    return value, weights


def _minimax_terms(u: Tensor, w: Tensor, mmd_squared: Tensor, radius: float, uniform_mean: bool,
                   case3_zero_bug: bool) -> tuple[Tensor, ...]:
    """(value, g, j*, E, e*, case1, case2, case3): `minimax_value` and the terms its gradient needs.

    Without an autograd graph to keep, S (a pass over [b, N]) is formed only where case 1 is
    possible: eps' = (g - E) / S <= 0 < r wherever g <= E, so there every candidate's case is
    decided by e* alone and case 1's value is never chosen (the same values, bit for bit)."""
    size = u.shape[-1]
    g, j_star = u.min(dim=-1)
    pi = torch.full_like(w, 1.0 / size) if uniform_mean else w
    mean = u @ pi
    gap = g - mean  # <= 0 but for rounding
    e_star = mmd_squared[j_star].clamp_min(0.0).sqrt().detach()
    tau = torch.where(e_star > 0, gap / torch.where(e_star > 0, e_star, torch.ones_like(e_star)), torch.zeros_like(gap))
    graph = u.requires_grad and torch.is_grad_enabled()
    if not graph and radius > 0 and not bool((gap > 0).any()):
        case1 = torch.zeros_like(gap, dtype=torch.bool)
        case2 = radius <= e_star
        value1 = g  # never chosen
    else:
        spread = size * ((u - mean.unsqueeze(-1)) ** 2 @ pi)
        s = torch.sqrt(spread.clamp_min(_TINY))
        with torch.no_grad():
            eps_prime = torch.where(spread > _TINY, gap / s, torch.zeros_like(gap))
        case1 = radius < eps_prime
        case2 = (eps_prime <= radius) & (radius <= e_star)
        value1 = mean + radius * (tau + s) / 2.0
    case3 = radius > e_star
    value2 = (mean + radius * tau + g) / 2.0
    if case3_zero_bug:
        result = torch.where(case1, value1, torch.zeros_like(g))
        if bool(case2.any()):
            result = torch.where(case2, value2, result)
        else:
            result = torch.where(case3, g, result)
    else:
        result = torch.where(case1, value1, torch.where(case2, value2, g))
    return result, g, j_star, mean, e_star, case1, case2, case3


class MinimaxAcquisition(Acquisition):
    """The minimax-approximation acquisition on a fixed context grid."""

    def __init__(
        self,
        model: GaussianProcess,
        beta: float,
        grid: Tensor,
        w: Tensor,
        gram: Tensor,
        radius: float,
        uniform_mean: bool,
        case3_zero_bug: bool,
        compiled: bool = False,
    ) -> None:
        super().__init__(radius=radius)
        self.model = model
        self.beta = beta
        self.grid_ucb = FixedContextUCB(model, grid, beta, compiled, sparse_backward=True)  # u [b, N] on the grid
        self.w = w
        self.mmd_squared = point_mmd_squared(gram, w)  # constant over the BO step
        self.uniform_mean = uniform_mean
        self.case3_zero_bug = case3_zero_bug
        self._distances: np.ndarray | None = None  # e* per grid point (the compiled closed form's)
        self._host_w: np.ndarray | None = None

    def forward(self, x: Tensor) -> Tensor:
        u = self.grid_ucb(x)
        start = time.perf_counter()
        value = minimax_value(u, self.w, self.mmd_squared, self.radius, self.uniform_mean, self.case3_zero_bug)
        self.telemetry.solves += x.shape[0]  # closed-form inner problems
        self.telemetry.seconds += time.perf_counter() - start
        return value

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """An Adam step of the paper profile's closed form on the compiled pair kernel: the value
        and x-gradient autograd gives through `forward`, to the bit (its backward pass through
        the closed form written out by `minimax_value_and_weights`, its elementwise part compiled
        by `mmd_minimax_kernel.minimax_step` where that decides every case), without autograd; None
        for the reference profile's variants, or where `minimax_value_and_weights` leaves it to autograd."""
        if self.uniform_mean or self.case3_zero_bug:
            return None

        def closed_form(u: Tensor) -> tuple[Tensor, Tensor] | None:  # (u: the compiled kernel's, on the CPU)
            from wdrbo_dist.acquisition.mmd.minimax_kernel import minimax_step  # numba: imported where it runs

            start = time.perf_counter()
            if self._distances is None:  # e* of every grid point, for the compiled closed form
                self._distances = self.mmd_squared.clamp_min(0.0).sqrt().numpy()
                self._host_w = self.w.numpy()
            found = minimax_step(u, self.w, self._host_w, self._distances, self.radius)
            if found is None:
                found = minimax_value_and_weights(u, self.w, self.mmd_squared, self.radius)
            if found is not None:
                self.telemetry.solves += u.shape[0]  # closed-form inner problems
                self.telemetry.seconds += time.perf_counter() - start
            return found

        return self.grid_ucb.value_and_gradient(x, closed_form)


class DRBOMMDMinimax(Algorithm):
    name = "drbo-mmd-minimax"
    display_name = "DRBO-MMD Minimax"
    colour = "#8c564b"
    description = "DRBO-MMD minimax approximation: closed-form worst-case sensitivity on a 1024-point grid"
    relative_cost = 2.6  # x ERBO's run time, mean of 8 problems (benchmarks/runner/study_estimate.py measures it)
    OPTIONS = {
        "grid_size": Option(1024, 1024, "points of the context grid (method §3.7)"),
        "radius_constant": Option(MMD_RADIUS_CONSTANT, MMD_RADIUS_CONSTANT, "r_n = radius_constant / sqrt(n)"),
        "mmd_diagonal_grid": Option(False, True, "a grid on the box diagonal where d_c >= 2 (method §8.3)"),
        "minimax_case3_zero_bug": Option(False, True, "case 3 gives 0 if any case 2 is in the call (method §8.4)"),
        "minimax_uniform_mean": Option(False, True, "the unweighted grid mean instead of E_w (method §8.4)"),
    }

    _grid: Tensor | None = None

    def grid(self) -> Tensor:
        if self._grid is None:
            self._grid = context_grid(
                self.problem.context_bounds, max(1, int(self.options["grid_size"])), bool(self.options["mmd_diagonal_grid"])
            )
        return self._grid

    def acquisition(self, model: GaussianProcess, state: BOState, generator: torch.Generator) -> Acquisition:
        device = model.train_x.device
        grid = self.grid().to(device)
        dim_x = self.problem.dim_x
        return MinimaxAcquisition(
            model,
            float(self.options["beta"]),
            grid,
            empirical_pmf(state.context.to(device), grid),
            context_gram(grid, model.lengthscale[dim_x:]),
            mmd_radius(state.n, float(self.options["radius_constant"])),
            uniform_mean=bool(self.options["minimax_uniform_mean"]),
            case3_zero_bug=bool(self.options["minimax_case3_zero_bug"]),
            compiled=model.settings.adam_pass == "compiled",
        )

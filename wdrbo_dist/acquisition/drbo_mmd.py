"""DRBO-MMD (method §3.6, Kirschner et al. 2020): the worst-case expected UCB over an MMD ball on a grid.

Per candidate, a second-order cone program over the pmf p on the context grid (the comment
above `MMDAcquisition` states it); alpha(x) = p*^T u with p* frozen (the envelope theorem).
Both profiles solve with Clarabel and a certified working set, the published SCS one option
away: the solver routes give the same results over seeds (docs/drbo_mmd.md).
"""


from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.acquisition.options import Option
from wdrbo_dist.acquisition.base import CHEAP, Acquisition, Algorithm, BOState
from wdrbo_dist.acquisition.compiled import FixedContextUCB
from wdrbo_dist.acquisition.mmd.grid import (
    MMD_RADIUS_CONSTANT,
    context_gram,
    context_grid,
    empirical_pmf,
    grid_axes,
    mmd_radius,
)
from wdrbo_dist.models.gp import GaussianProcess

from wdrbo_dist.acquisition.mmd.factors import gram_factor, tensor_grid_factor
from wdrbo_dist.acquisition.mmd.solver import SOLVERS, MMDWorstCase, drop_zero_cone_rows
from wdrbo_dist.models.settings import NumericalSettings

__all__ = ["DRBOMMD", "MMDAcquisition", "MMDWorstCase", "drop_zero_cone_rows", "gram_factor", "tensor_grid_factor"]


# Per candidate x, with u_j = UCB(x, g_j) on the context grid (100 points), w the nearest-grid-point
# pmf of the observed contexts, K the GP's context Gram matrix and r_n = 4.146 / sqrt(n):
#
#     p* = argmin_p u^T p  s.t.  p >= 0, sum p = 1, ||F^T (p - w)||_2 <= r_n,   with F F^T = K,
#
# a second-order cone program per candidate (mmd/solver.py, on a factor F of mmd/factors.py);
# alpha(x) = p*^T u with p* frozen (the gradient flows through u: the envelope theorem). A solve
# without a usable solution falls back to p = w, as in the reference. Both profiles solve with
# Clarabel and a certified working set, the published SCS one option away: the solver routes give
# the same results over seeds (docs/drbo_mmd.md has the measurements and the reasons). An Adam
# step's u and its backward pass come from the compiled pair kernel (NumericalSettings.adam_pass
# `compiled`, on the CPU), the screening pass's from torch's pass on the grid's features.
class MMDAcquisition(Acquisition):
    """p*(x)^T u(x), with p* the solved worst case on the grid for each candidate."""

    def __init__(
        self, model: GaussianProcess, beta: float, grid: Tensor, w: Tensor, program: MMDWorstCase, radius: float,
        compiled: bool = False,
    ) -> None:
        super().__init__(radius=radius)
        self.model = model
        self.beta = beta
        self.grid_ucb = FixedContextUCB(model, grid, beta, compiled)  # u [b, M]: the grid is fixed
        self.w = w
        self.program = program
        self._solved: dict[bytes, np.ndarray] = {}  # this step's solutions by UCB row

    def worst_case(self, u: np.ndarray) -> np.ndarray:
        """p* [b, M] for the UCB rows u [b, M] (one conic solve per distinct row).

        A row equal, bit for bit, to one already solved in this BO step (a restart pinned to a
        bound, restarts that met) reuses that solution: 3-4 % of the rows on Ackley and Branin.
        Telemetry counts the solves actually run.
        """
        w = self.w.detach().cpu().numpy()
        rows = np.empty_like(u)
        tel = self.telemetry
        programs_before = self.program.programs
        finite = np.isfinite(u).all(axis=1)
        for i in range(u.shape[0]):
            key = u[i].tobytes()
            if key in self._solved:
                rows[i] = self._solved[key]
                continue
            start = time.perf_counter()
            if finite[i]:
                p, status = self.program.solve(u[i], slot=(u.shape[0], i))
            else:  # SCS would iterate to its limit on a non-finite objective
                p, status = None, "nonfinite objective"
            tel.seconds += time.perf_counter() - start
            tel.solves += 1
            if status != "optimal":
                tel.failures += 1
            if p is None or not np.isfinite(p).all():
                tel.fallbacks += 1
                p = w
            rows[i] = p
            self._solved[key] = rows[i].copy()
        tel.programs += self.program.programs - programs_before
        return rows

    def forward(self, x: Tensor) -> Tensor:
        u = self.grid_ucb(x)
        p = self.worst_case(u.detach().cpu().numpy().astype(np.float64))
        return (torch.as_tensor(p).to(u) * u).sum(dim=-1)

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """An Adam step on the compiled pair kernel: p*^T u and its x-gradient, the kernel's
        backward pass with the weights p* (autograd's through `forward`, negated to the bit:
        its loss hands each value -1), without autograd."""
        def worst_case_mean(u: Tensor) -> tuple[Tensor, Tensor]:
            p = torch.as_tensor(self.worst_case(u.numpy().astype(np.float64))).to(u)
            return (p * u).sum(dim=-1), p

        return self.grid_ucb.value_and_gradient(x, worst_case_mean)


class DRBOMMD(Algorithm):
    name = "drbo-mmd"
    display_name = "DRBO-MMD"
    colour = "#9467bd"
    description = "DRBO-MMD: worst-case mean UCB over an MMD ball on a 100-point context grid (SOCP per candidate)"
    settings = CHEAP
    relative_cost = 1.9  # x ERBO's run time, mean of 8 problems (benchmarks/runner/study_estimate.py measures it)
    # With SCS (no working set), x ERBO: measured against a slower ERBO (8.2), then scaled by
    # 1.34, the rise of the compiled route's own ratio (1.71 -> 2.29) when ERBO's runs got shorter.
    SCS_COST = 11.0
    OPTIONS = {
        "grid_size": Option(100, 100, "points of the context grid (method §3.6)"),
        "radius_constant": Option(MMD_RADIUS_CONSTANT, MMD_RADIUS_CONSTANT, "r_n = radius_constant / sqrt(n)"),
        "mmd_diagonal_grid": Option(False, True, "a grid on the box diagonal where d_c >= 2 (method §8.3)"),
        # CLARABEL (interior point, tolerance 1e-8) in both profiles: the same optimum as the
        # published SCS (first-order, eps 1e-5), more accurately and with the working set far
        # faster; benchmarks/speed/paired.py --preset mmd-solver compares them over seeds.
        "mmd_solver": Option.same("CLARABEL", "the conic solver: CLARABEL, or SCS (the published code's)",
                                  choices=SOLVERS),
    }

    _grid: Tensor | None = None
    _program: MMDWorstCase | None = None

    @classmethod
    def cost_estimate(cls, options: Mapping[str, Any]) -> float:
        return cls.relative_cost if options["mmd_solver"] == "CLARABEL" else cls.SCS_COST

    def grid(self) -> Tensor:
        if self._grid is None:
            self._grid = context_grid(
                self.problem.context_bounds, max(1, int(self.options["grid_size"])), bool(self.options["mmd_diagonal_grid"])
            )
        return self._grid

    def program(self, settings: NumericalSettings) -> MMDWorstCase:
        """The conic program, built at the first step on the run's routes (the working set with
        Clarabel on the compiled path only; equilibration unset: the solver's own, on for SCS)."""
        if self._program is None:
            solver = str(self.options["mmd_solver"]).upper()
            equilibrate = settings.mmd_equilibrate
            self._program = MMDWorstCase(
                self.grid().shape[0],
                solver=solver,
                path=settings.mmd_solve_path,
                warm_start=settings.mmd_warm_start,
                equilibrate=solver == "SCS" if equilibrate is None else equilibrate,
                working_set=settings.mmd_working_set,
            )
        return self._program

    def factor(self, gram: Tensor, context_lengthscale: Tensor, kind: str = "pivoted") -> np.ndarray:
        """The PSD-safe factor of K handed to the conic solver (per-axis on tensor grids)."""
        tensor = self.problem.dim_c > 1 and not self.options["mmd_diagonal_grid"]
        if kind == "pivoted" and tensor:
            size = max(1, int(self.options["grid_size"]))
            axes = [a.numpy() for a in grid_axes(self.problem.context_bounds, size, diagonal=False)]
            return tensor_grid_factor(axes, context_lengthscale.detach().cpu().numpy())
        return gram_factor(gram.cpu().numpy(), kind)

    def acquisition(self, model: GaussianProcess, state: BOState, generator: torch.Generator) -> Acquisition:
        device = model.train_x.device
        grid = self.grid().to(device)
        dim_x = self.problem.dim_x
        w = empirical_pmf(state.context.to(device), grid)
        gram = context_gram(grid, model.lengthscale[dim_x:])
        radius = mmd_radius(state.n, float(self.options["radius_constant"]))
        program = self.program(model.settings)
        start = time.perf_counter()
        program.prepare(self.factor(gram, model.lengthscale[dim_x:], model.settings.mmd_factor), w.cpu().numpy(), radius)
        acquisition = MMDAcquisition(model, float(self.options["beta"]), grid, w, program, radius,
                                     compiled=model.settings.adam_pass == "compiled")
        acquisition.telemetry.seconds += time.perf_counter() - start
        return acquisition

"""The numerical routes of a run: one frozen `NumericalSettings`, made once per run from its device.

A route is how a number is computed, not which number the method asks for: each field names
the route of one computation. On the CPU the compiled kernels where they exist, on another
device (a GPU) torch's. The run makes the settings (`for_run`) and hands them to the GP's fit,
the GP carries them, and every acquisition reads them from its model. Algorithm options
(acquisition/options.py) are science only: the methods' hyperparameters and the published
code's faults. A leaf module: it imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class NumericalSettings:
    """The route of each computation; the defaults are the CPU's (the compiled kernels)."""

    # The GP's route for a context set (models/pair_routes.py, `ucb_pairs`): a numerical basis
    # of the context vectors wherever it needs fewer multiply-adds, or always the pair products.
    context_basis: bool = True
    # An Adam step's value and x-gradient: the compiled kernels (acquisition/compiled.py, CPU
    # only) or torch's autograd through the GP's routes.
    adam_pass: Literal["compiled", "torch"] = "compiled"
    # WDRBO's differentiated L(x): its x-gradient in closed form or by a double backward.
    wdrbo_L_gradient: Literal["analytic", "autograd"] = "analytic"
    # DRBO-MMD's conic program: a compiled solver workspace per step, or CVXPY's problem.solve.
    mmd_solve_path: Literal["compiled", "cvxpy"] = "compiled"
    # The PSD-safe factor of the grid's Gram matrix: pivoted, eigen (cutoff), cholesky (jitter).
    mmd_factor: Literal["pivoted", "eigen", "cholesky"] = "pivoted"
    # Warm starts of the conic solves from the same batch row's last solution.
    mmd_warm_start: bool = True
    # Data equilibration of the compiled program (None: the solver's own, on for SCS, off for Clarabel).
    mmd_equilibrate: bool | None = None
    # Certified working-set solves (acquisition/mmd_working_set.py): Clarabel and the compiled path only.
    mmd_working_set: bool = True

    @classmethod
    def for_run(cls, device: str) -> "NumericalSettings":
        """The routes of a run on `device` ("cpu", "cuda", "cuda:N"), the same in both profiles."""
        settings = cls()
        if not device.startswith("cpu"):  # the compiled kernels take CPU tensors only
            settings = replace(settings, adam_pass="torch")
        return settings


CPU = NumericalSettings()

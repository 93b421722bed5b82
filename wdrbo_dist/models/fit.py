"""The MAP fit of the GP of method §1.4 (`fit_gp`): L-BFGS-B on the MAP objective from the priors'
modes, retried from draws of the priors as BoTorch does."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.models.lbfgsb import minimize_lbfgsb
from wdrbo_dist.models.map_objective import FAILED_OBJECTIVE, LENGTHSCALE_MIN, NOISE_MIN, NOISE_PRIOR, lengthscale_prior
from wdrbo_dist.models.settings import CPU, NumericalSettings

MAX_FIT_ATTEMPTS = 5


def standardize(y: Tensor) -> tuple[Tensor, float, float]:
    """(y - mean) / std with the unbiased std (a constant y gets std 1)."""
    mean = float(y.mean())
    std = float(y.std()) if y.numel() > 1 else 1.0
    if not math.isfinite(std) or std <= 0.0:
        std = 1.0
    return (y - mean) / std, mean, std


@dataclass(frozen=True)
class FitReport:
    attempts: int
    converged: bool
    neg_log_posterior: float  # the minimised objective (per data point)


def fit_gp(
    train_x: Tensor, train_y: Tensor, generator: torch.Generator, settings: NumericalSettings = CPU,
) -> tuple[GaussianProcess, FitReport]:
    """MAP-fit the GP of method §1.4 on (train_x, train_y) from the prior modes, the objective in
    numba kernels on the host (models/compiled_fit.py) on every device. `settings`: the run's
    numerical routes, which the fitted model takes for context sets.

    An attempt whose L-BFGS-B fails (other than at its iteration limit, as in BoTorch) or meets
    a non-finite value is retried from hyperparameters drawn from the priors with `generator`,
    up to 5 attempts as BoTorch does; if none converges, the best attempt is kept (and the
    report says so) where BoTorch raises: a run is not lost to a hard fit.
    """
    dtype, device = train_x.dtype, train_x.device
    n, dim = train_x.shape
    y_std, y_mean, y_scale = standardize(train_y)
    loc, scale = lengthscale_prior(dim)
    host_x, host_y = train_x.detach().cpu().numpy(), y_std.detach().cpu().numpy()

    from wdrbo_dist.models.compiled_fit import CompiledMapObjective  # numba: imported where it is first used

    objective = CompiledMapObjective(host_x, host_y, (loc, scale))
    lower = np.array([LENGTHSCALE_MIN] * dim + [NOISE_MIN, -np.inf])
    upper = np.full(dim + 2, np.inf)

    start = np.array([math.exp(loc - scale**2)] * dim + [math.exp(NOISE_PRIOR[0] - NOISE_PRIOR[1] ** 2), 0.0])
    best: tuple[float, np.ndarray] | None = None
    converged = False
    attempts = 0
    for attempts in range(1, MAX_FIT_ATTEMPTS + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = minimize_lbfgsb(objective, start, lower, upper)
        value = float(res.fun)
        if math.isfinite(value) and (best is None or value < best[0]):
            best = (value, res.x.copy())
        # BoTorch's rule: L-BFGS-B stopping at its iteration or evaluation limit (status 1) is
        # not a failed attempt; anything else unsuccessful is retried.
        if (res.success or res.status == 1) and math.isfinite(value) and value < FAILED_OBJECTIVE:
            converged = True
            best = (value, res.x.copy())
            break
        # Retry from a draw of the priors (on the CPU generator: identical on every device).
        ls = torch.exp(loc + scale * torch.randn(dim, generator=generator, dtype=torch.float64))
        nz = torch.exp(NOISE_PRIOR[0] + NOISE_PRIOR[1] * torch.randn(1, generator=generator, dtype=torch.float64))
        start = np.concatenate([np.maximum(ls.numpy(), LENGTHSCALE_MIN), np.maximum(nz.numpy(), NOISE_MIN), [0.0]])
    assert best is not None, "GP fit produced no finite objective value"
    theta = torch.tensor(best[1], dtype=dtype, device=device)
    model = GaussianProcess(
        train_x,
        y_std,
        lengthscale=theta[:dim].clamp_min(LENGTHSCALE_MIN),
        noise=float(theta[dim].clamp_min(NOISE_MIN)),
        mean_constant=float(theta[dim + 1]),
        y_mean=y_mean,
        y_std=y_scale,
        settings=settings,
    )
    return model, FitReport(attempts=attempts, converged=converged, neg_log_posterior=best[0])

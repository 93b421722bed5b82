"""The GP fit's MAP objective (models/compiled_fit.py) against the same objective written out in
NumPy here: the same value and gradient to rounding, the same failures, and a fit that lands
on the same hyperparameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from wdrbo_dist.models import compiled_fit
from wdrbo_dist.models.compiled_fit import CompiledMapObjective
from wdrbo_dist.models.fit import fit_gp, standardize
from wdrbo_dist.models.map_objective import FAILED_OBJECTIVE, NOISE_PRIOR, lengthscale_prior


class NumpyObjective:
    """-(log N(y | m, K + s2 I) + log priors) / n and its analytic gradient
    d/dtheta = tr((K^{-1} - a a^T) dK/dtheta) / 2 (a = K^{-1} (y - m)), in plain NumPy arrays."""

    def __init__(self, x: np.ndarray, y: np.ndarray, ls_prior: tuple[float, float]) -> None:
        self.n, self.dim = x.shape
        self.y = y
        self.sq_diff = (x[:, None, :] - x[None, :, :]) ** 2  # [n, n, D]
        self.ls_prior = ls_prior

    @staticmethod
    def _log_normal(v: np.ndarray, loc: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
        lv = np.log(v)
        logp = -lv - math.log(scale * math.sqrt(2.0 * math.pi)) - (lv - loc) ** 2 / (2.0 * scale**2)
        return logp, -1.0 / v - (lv - loc) / (scale**2 * v)

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        dim, n = self.dim, self.n
        ls, noise, mean = theta[:dim], theta[dim], theta[dim + 1]
        failed = (FAILED_OBJECTIVE, np.zeros_like(theta))
        if np.any(ls <= 0) or noise <= 0:
            return failed
        scaled = self.sq_diff / ls**2
        k_rbf = np.exp(-0.5 * scaled.sum(-1))
        try:
            chol = np.linalg.cholesky(k_rbf + noise * np.eye(n))
        except np.linalg.LinAlgError:
            return failed
        resid = self.y - mean
        chol_inv = scipy.linalg.solve_triangular(chol, np.eye(n), lower=True)
        k_inv = chol_inv.T @ chol_inv
        alpha = k_inv @ resid
        nll = 0.5 * resid @ alpha + np.log(np.diag(chol)).sum() + 0.5 * n * math.log(2.0 * math.pi)
        w = k_inv - np.outer(alpha, alpha)
        g_ls = 0.5 * np.einsum("ij,ijk->k", w * k_rbf, scaled) / ls  # dK/dl_k = K (x_ik - x_jk)^2 / l_k^3
        lp_ls, dlp_ls = self._log_normal(ls, *self.ls_prior)
        lp_nz, dlp_nz = self._log_normal(np.array([noise]), *NOISE_PRIOR)
        value = (nll - lp_ls.sum() - lp_nz[0]) / n
        grad = np.concatenate([g_ls - dlp_ls, [0.5 * np.trace(w) - dlp_nz[0]], [-alpha.sum()]]) / n
        if not math.isfinite(value) or not np.all(np.isfinite(grad)):
            return failed
        return float(value), grad


def _objectives(n: int, dim: int, seed: int) -> tuple[NumpyObjective, CompiledMapObjective]:
    generator = np.random.default_rng(seed)
    x = generator.random((n, dim))
    y = standardize(torch.tensor(np.sin(5 * x).sum(-1) + 0.1 * generator.standard_normal(n)))[0].numpy()
    prior = lengthscale_prior(dim)
    return NumpyObjective(x, y, prior), CompiledMapObjective(x, y, prior)


@pytest.mark.parametrize("n,dim", [(5, 2), (40, 3), (99, 4)])
@pytest.mark.parametrize("theta_head", [(0.3, 0.02, 0.1), (0.05, 1e-4, -0.4), (2.5, 0.5, 1.0)])
def test_value_and_gradient_equal_numpys(n: int, dim: int, theta_head: tuple[float, float, float]) -> None:
    numpy_objective, compiled = _objectives(n, dim, seed=n)
    lengthscale, noise, mean = theta_head
    theta = np.array([lengthscale * (1 + 0.3 * d) for d in range(dim)] + [noise, mean])
    value, gradient = compiled(theta)
    expected_value, expected_gradient = numpy_objective(theta)
    assert value == pytest.approx(expected_value, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("theta", [[-0.1, 0.3, 0.01, 0.0], [0.3, 0.0, 0.01, 0.0], [0.3, 0.3, -1e-3, 0.0]])
def test_an_invalid_parameter_fails_as_numpys(theta: list[float]) -> None:
    numpy_objective, compiled = _objectives(12, 2, seed=1)
    value, gradient = compiled(np.array(theta))
    assert value == FAILED_OBJECTIVE == numpy_objective(np.array(theta))[0]
    assert not gradient.any()


def test_a_covariance_that_is_not_positive_definite_fails_as_numpys() -> None:
    x = np.repeat(np.random.default_rng(2).random((4, 2)), 2, axis=0)  # every point twice
    y = np.linspace(-1.0, 1.0, 8)
    theta = np.array([0.4, 0.4, 1e-300, 0.0])  # 1 + 1e-300 == 1: K singular in floating point
    compiled = CompiledMapObjective(x, y, lengthscale_prior(2))
    assert compiled(theta)[0] == FAILED_OBJECTIVE == NumpyObjective(x, y, lengthscale_prior(2))(theta)[0]


def test_a_fit_lands_on_numpys_hyperparameters(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.rand(50, 3, generator=generator, dtype=torch.float64)
    y = torch.sin(6 * x).sum(-1) + 0.1 * torch.randn(50, generator=generator, dtype=torch.float64)
    compiled_model, compiled_report = fit_gp(x, y, torch.Generator().manual_seed(0))
    made: list[NumpyObjective] = []  # the fit on NumPy's arithmetic
    monkeypatch.setattr(compiled_fit, "CompiledMapObjective", lambda *data: made.append(NumpyObjective(*data)) or made[-1])
    numpy_model, numpy_report = fit_gp(x, y, torch.Generator().manual_seed(0))
    assert len(made) == 1
    assert compiled_report.converged and compiled_report.attempts == numpy_report.attempts
    assert compiled_report.neg_log_posterior == pytest.approx(numpy_report.neg_log_posterior, rel=1e-10)
    torch.testing.assert_close(compiled_model.lengthscale, numpy_model.lengthscale, rtol=1e-6, atol=0.0)
    assert compiled_model.noise == pytest.approx(numpy_model.noise, rel=1e-5)
    assert compiled_model.mean_constant == pytest.approx(numpy_model.mean_constant, abs=1e-7)

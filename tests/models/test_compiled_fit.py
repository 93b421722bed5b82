"""The compiled MAP objective (NumericalSettings.gp_objective `compiled`) is NumPy's `MapObjective` to
rounding: the same value and gradient, the same failures, and a fit that lands on the same
hyperparameters."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from wdrbo_dist.models.compiled_fit import CompiledMapObjective
from wdrbo_dist.models.fit import fit_gp, standardize
from wdrbo_dist.models.map_objective import FAILED_OBJECTIVE, MapObjective, lengthscale_prior
from wdrbo_dist.settings import CPU


def _objectives(n: int, dim: int, seed: int) -> tuple[MapObjective, CompiledMapObjective]:
    generator = np.random.default_rng(seed)
    x = generator.random((n, dim))
    y = standardize(torch.tensor(np.sin(5 * x).sum(-1) + 0.1 * generator.standard_normal(n)))[0].numpy()
    prior = lengthscale_prior(dim)
    return MapObjective(x, y, prior), CompiledMapObjective(x, y, prior)


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
    assert compiled(theta)[0] == FAILED_OBJECTIVE == MapObjective(x, y, lengthscale_prior(2))(theta)[0]


def test_a_fit_lands_on_numpys_hyperparameters() -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.rand(50, 3, generator=generator, dtype=torch.float64)
    y = torch.sin(6 * x).sum(-1) + 0.1 * torch.randn(50, generator=generator, dtype=torch.float64)
    fits = [fit_gp(x, y, torch.Generator().manual_seed(0), replace(CPU, gp_objective=route)) for route in ("numpy", "compiled")]
    (numpy_model, numpy_report), (compiled_model, compiled_report) = fits
    assert compiled_report.converged and compiled_report.attempts == numpy_report.attempts
    assert compiled_report.neg_log_posterior == pytest.approx(numpy_report.neg_log_posterior, rel=1e-10)
    torch.testing.assert_close(compiled_model.lengthscale, numpy_model.lengthscale, rtol=1e-6, atol=0.0)
    assert compiled_model.noise == pytest.approx(numpy_model.noise, rel=1e-5)
    assert compiled_model.mean_constant == pytest.approx(numpy_model.mean_constant, abs=1e-7)

"""The portfolio surrogate against the 20 check points shipped with the package data."""

from __future__ import annotations

import csv
import importlib.resources

import pytest
import torch

from wdrbo_dist.problems import portfolio
from wdrbo_dist.problems.portfolio import surrogate, surrogate_mean


def check_points() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    path = importlib.resources.files("wdrbo_dist") / "data" / "portfolio_check_points.csv"
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    u = torch.tensor([[float(r[f"x{i}"]) for i in range(5)] for r in rows], dtype=torch.float64)
    s64 = torch.tensor([float(r["surrogate_mean_float64"]) for r in rows], dtype=torch.float64)
    s32 = torch.tensor([float(r["surrogate_mean_reference_float32"]) for r in rows], dtype=torch.float64)
    return u, s64, s32


def test_check_points_float64() -> None:
    u, s64, _ = check_points()
    assert u.shape == (20, 5)
    torch.testing.assert_close(surrogate_mean(u), s64, rtol=0, atol=1e-6)


def test_check_points_reference_float32() -> None:
    u, _, s32 = check_points()
    torch.testing.assert_close(surrogate_mean(u), s32, rtol=0, atol=1e-3)


def test_objective_is_the_negated_surrogate(get_problem) -> None:
    u, s64, _ = check_points()
    for name in ("portfolio-uniform", "portfolio-normal"):
        f = get_problem(name).evaluate(u[:, :3], u[:, 3:])
        torch.testing.assert_close(f, -s64, rtol=0, atol=1e-6)


def test_solve_happens_once_per_process() -> None:
    assert surrogate() is surrogate()
    assert portfolio.surrogate.cache_info().currsize == 1


def test_surrogate_shapes() -> None:
    s = surrogate()
    assert s.scaled_inputs.shape == (3000, 5) and s.alpha.shape == (3000,)
    assert s.alpha.dtype == torch.float64
    assert s.outcome_mean == pytest.approx(-2.885738, abs=1e-6)
    assert s.outcome_std == pytest.approx(3.829588, abs=1e-6)
    u = torch.rand(2, 3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert surrogate_mean(u).shape == (2, 3)

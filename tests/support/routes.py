"""Numerical routes for the tests that hold one route against another: each builds the two
settings objects (`dataclasses.replace`) and a model on each, never an algorithm option."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.settings import NumericalSettings

# The pair products everywhere and NumPy's objective, with the compiled Adam step: the routes
# the acquisition tests hold the others against (the GP's routes before it took settings).
PAIRS = NumericalSettings(context_basis=False, basis_tolerance=0.0, region_tolerance=0.0, basis_forms="batched",
                          context_forms=False, gp_objective="numpy")


def with_routes(model: GaussianProcess, **routes: Any) -> GaussianProcess:
    """The same fitted GP on its settings with `routes` replaced."""
    return GaussianProcess(model.train_x, model.train_y, model.lengthscale, model.noise, model.mean_constant,
                           model.y_mean, model.y_std, settings=replace(model.settings, **routes))


def force_routes(monkeypatch: Any, **routes: Any) -> None:
    """Every run started after this takes its device's and profile's settings with `routes`
    replaced: how a test runs one route against another (a run's user cannot)."""
    usual = NumericalSettings.for_run.__func__  # type: ignore[attr-defined]

    def for_run(cls: type[NumericalSettings], device: str, fidelity: str) -> NumericalSettings:
        return replace(usual(cls, device, fidelity), **routes)

    monkeypatch.setattr(NumericalSettings, "for_run", classmethod(for_run))

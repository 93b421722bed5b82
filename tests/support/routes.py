"""Numerical routes for the tests that hold one route against another: each builds the two
settings objects (`dataclasses.replace`) and a model on each, never an algorithm option."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.models.settings import NumericalSettings

# The pair products everywhere (no context basis), the other routes the CPU's: the GP's route
# the acquisition tests hold the basis route against.
PAIRS = NumericalSettings(context_basis=False)


def with_routes(model: GaussianProcess, **routes: Any) -> GaussianProcess:
    """The same fitted GP on its settings with `routes` replaced."""
    return GaussianProcess(model.train_x, model.train_y, model.lengthscale, model.noise, model.mean_constant,
                           model.y_mean, model.y_std, settings=replace(model.settings, **routes))

"""GP-UCB (method §3.3): a GP on the decision only; the context is unmodelled noise.

Adam steps on the CPU take the compiled kernel (NumericalSettings.adam_pass): the
same acquisition, its gradient in closed form rather than by autograd."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from wdrbo_dist.acquisition.options import Option
from wdrbo_dist.acquisition.base import Acquisition, Algorithm, BOState
from wdrbo_dist.acquisition.compiled import (
    compiled_posterior_ucb, compiled_route, compiled_value_and_gradient,
)
from wdrbo_dist.models.gp import GaussianProcess


class UpperConfidenceBound(Acquisition):
    """mu(x) + multiplier * sigma(x) on a GP over x."""

    def __init__(self, model: GaussianProcess, multiplier: float, compiled: bool = False) -> None:
        super().__init__()
        self.model = model
        self.multiplier = multiplier
        self._compiled = compiled_posterior_ucb(model, multiplier) if compiled else None

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        return compiled_value_and_gradient(self._compiled, x)

    def forward(self, x: Tensor) -> Tensor:
        if (kernel := compiled_route(self._compiled, x)) is not None:  # (built on the CPU only)
            return kernel(x)
        return self.model.ucb(x, self.multiplier)


class GPUCB(Algorithm):
    name = "gp-ucb"
    display_name = "GP-UCB"
    colour = "#7f7f7f"
    description = "GP-UCB on the decision only, ignoring the context"
    uses_context = False
    relative_cost = 0.4  # x ERBO's run time, mean of 8 problems (benchmarks/runner/study_estimate.py measures it)
    OPTIONS = {
        # The reference passes beta to BoTorch's UpperConfidenceBound, which multiplies sigma by
        # sqrt(beta) (method §1.5, §8.7); the paper profile uses beta itself, like every other method.
        "gpucb_sqrt_beta": Option(False, True, "sigma multiplied by sqrt(beta), as BoTorch's UCB does (method §8.7)"),
    }

    def acquisition(self, model: GaussianProcess, state: BOState, generator: torch.Generator) -> Acquisition:
        beta = float(self.options["beta"])
        multiplier = math.sqrt(beta) if self.options["gpucb_sqrt_beta"] else beta
        return UpperConfidenceBound(model, multiplier, compiled=model.settings.adam_pass == "compiled")

"""Algorithms without a surrogate: the BO loop asks them for the next decision directly.

`RandomSearch` is the floor every BO method must beat and the anchor of the report's normalised
score: the points of one scrambled Sobol sequence over the decision box, seeded from the run's
algorithm generator, so that a seed gives the same decisions on any machine. It fits no GP and
maximises no acquisition, so its runs cost the truth evaluation and little else.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from wdrbo_dist.acquisition.base import Acquisition, Algorithm, BOState
from wdrbo_dist.acquisition.options import Option
from wdrbo_dist.acquisition.sobol import draw_seed
from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.problems.base import Problem


class ModelFreeAlgorithm(Algorithm):
    """An algorithm that proposes each decision itself; the loop fits no model for it."""

    uses_context = False

    @classmethod
    def read_options(cls) -> dict[str, Option]:
        """Only its own: it has no UCB and no optimiser. (It still takes the common options, so that
        one set of options can be given to every algorithm of a study; they change nothing.)"""
        return dict(cls.OPTIONS)

    @abc.abstractmethod
    def propose(self, state: BOState, generator: torch.Generator) -> Tensor:
        """The next decision [d_x] in the unit box, given the data so far."""

    def acquisition(self, model: GaussianProcess, state: BOState, generator: torch.Generator) -> Acquisition:
        raise TypeError(f"{self.name} is model-free: the BO loop calls propose(), not acquisition()")


class RandomSearch(ModelFreeAlgorithm):
    name = "random"
    display_name = "Random (Sobol)"
    colour = "#b8860b"
    description = "quasi-random search: a scrambled Sobol sequence over the decision box, no model"
    relative_cost = 0.05  # the truth evaluation only

    def __init__(self, problem: Problem, fidelity: str, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(problem, fidelity, options)
        self._engine: torch.quasirandom.SobolEngine | None = None

    def propose(self, state: BOState, generator: torch.Generator) -> Tensor:
        """The next point of the run's sequence; its scramble is drawn from `generator` at the
        first call (one draw, so the algorithm stream is used the same way at every seed)."""
        if self._engine is None:
            self._engine = torch.quasirandom.SobolEngine(self.problem.dim_x, scramble=True,
                                                         seed=draw_seed(generator))
        return self._engine.draw(1, dtype=torch.float64)[0]

"""The `Problem` contract: what a BO run needs to know about a test problem.

A problem knows its decision and context spaces, how the environment draws a context and
answers a query (method §1.1), the true expectation E_{c~P*}[f(x, c)] by the fixed QMC
rule, and that expectation's exact optimum; nothing of GPs, algorithms, Ray or MLflow.
Conventions (method §0 and §4): `x` in `decision_bounds` (the unit box, [-1, 1] for the
general-setting toy), `c` in `context_bounds`; everything is maximisation; all tensors are
float64 and randomness comes only from the CPU `torch.Generator` passed in, so a run gives the
same numbers on every device.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor

Fidelity = Literal["paper", "reference"]
FIDELITIES: tuple[str, ...] = ("paper", "reference")
DTYPE = torch.float64


@dataclass(frozen=True)
class Observation:
    """What the environment returns for a batch of decisions (method §1.1)."""

    y: Tensor  # [b] observed values f(x, c)
    context: Tensor  # [b, d_c] the context returned to the learner (may differ from the one f used)


@dataclass(frozen=True)
class CentreDistribution:
    """A given ambiguity centre for WDRBO's general setting: a fixed quadrature of P-hat."""

    nodes: Tensor  # [m, d_c] context points
    weights: Tensor  # [m] nonnegative, summing to one
    radius: float  # the constant Wasserstein radius eps_t


class Problem(abc.ABC):
    """A contextual test problem: max_x E_{c~P*}[f(x, c)]."""

    name: ClassVar[str]  # the registry key, used in configs and run keys
    display_name: ClassVar[str]  # as the paper writes it: tables, figures, the dashboard
    dim_x: ClassVar[int]
    dim_c: ClassVar[int]

    def __init__(self, fidelity: Fidelity = "paper") -> None:
        if fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {FIDELITIES}, got {fidelity!r}")
        self.fidelity: Fidelity = fidelity

    # --- spaces -----------------------------------------------------------------------------
    @property
    def decision_bounds(self) -> Tensor:
        """[2, d_x] lower and upper bounds of x (the unit box unless overridden)."""
        return torch.stack([torch.zeros(self.dim_x, dtype=DTYPE), torch.ones(self.dim_x, dtype=DTYPE)])

    @property
    def context_bounds(self) -> Tensor:
        """[2, d_c] lower and upper bounds of the context domain (the unit box unless overridden)."""
        return torch.stack([torch.zeros(self.dim_c, dtype=DTYPE), torch.ones(self.dim_c, dtype=DTYPE)])

    # --- the environment ----------------------------------------------------------------------
    @abc.abstractmethod
    def sample_context(self, n: int, generator: torch.Generator) -> Tensor:
        """Draw `n` contexts from P* ([n, d_c], float64, CPU), as the learner observes them."""

    @abc.abstractmethod
    def evaluate(self, x: Tensor, c: Tensor) -> Tensor:
        """f(x, c) for broadcastable `x` [..., d_x] and `c` [..., d_c]; returns [...].

        This is the function the learner observes (for Newsvendor, with the demand clamped).
        """

    def observe(self, x: Tensor, generator: torch.Generator) -> Observation:
        """The environment of method §1.1: a fresh context per row, y = f(x, c), no noise."""
        c = self.sample_context(x.shape[0], generator)
        return Observation(y=self.evaluate(x, c), context=c)

    # --- the truth ----------------------------------------------------------------------------
    @abc.abstractmethod
    def expected_value(self, x: Tensor) -> Tensor:
        """E_{c~P*}[f(x, c)] by the deterministic QMC rule, vectorised: [b, d_x] -> [b]."""

    optimal_value: float
    """max_x E[f(x, .)] under the same QMC rule (method §4); a class attribute, or a property
    where it depends on the fidelity profile (SixHumpCamel)."""

    optimal_x: tuple[float, ...]
    """An argmax of the expectation."""

    reference_optimal_value: float
    """The published code's hard-coded `max_stochastic` constant (method §5.2)."""

    def optimum(self) -> tuple[Tensor, float]:
        """The exact optimum (argmax, value) used for the regret in this fidelity profile."""
        return torch.tensor(self.optimal_x, dtype=DTYPE), float(self.optimal_value)

    # --- the general setting -------------------------------------------------------------------
    def centre_distribution(self) -> CentreDistribution | None:
        """For the general setting: the given centre P-hat and radius; None when data-driven."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fidelity={self.fidelity!r})"


# What a registered problem class must declare (as class attributes or properties): a missing
# one would otherwise show up only as a failed run or a raw name in a table.
REQUIRED_CONSTANTS = ("name", "display_name", "dim_x", "dim_c", "optimal_value", "optimal_x",
                      "reference_optimal_value")


def missing_constants(cls: type[Problem]) -> list[str]:
    return [constant for constant in REQUIRED_CONSTANTS if not hasattr(cls, constant)]


def sobol_points(n: int, dim: int) -> Tensor:
    """The first `n` points of the unscrambled Sobol sequence in `dim` dimensions (float64).

    This is the QMC rule of method §4 (its first point is the origin).
    """
    engine = torch.quasirandom.SobolEngine(dimension=dim, scramble=False)
    return engine.draw(n, dtype=DTYPE)

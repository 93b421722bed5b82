"""What every algorithm provides to the BO loop, and how its options are declared.

An `Algorithm` is built once per run (with the resolved options of its fidelity profile) and
asked, at every BO step, for an `Acquisition`: a module whose forward maps candidate
decisions [b, d_x] (in the unit box) to values [b] (in standardised-y units, method §1.4).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from wdrbo_dist.acquisition.options import Option, OptionValue
from wdrbo_dist.acquisition.optimize import CHEAP, STANDARD, OptimizerSettings
from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.problems.base import Problem



@dataclass
class BOState:
    """The learner's data at one step; decisions are mapped to the unit box."""

    x: Tensor  # [n, d_x] in [0, 1]^{d_x}
    context: Tensor  # [n, d_c] observed contexts
    y: Tensor  # [n] observed values

    @property
    def n(self) -> int:
        return self.x.shape[0]


@dataclass
class InnerTelemetry:
    """Counts of an acquisition's inner problems (conic solves, closed forms)."""

    solves: int = 0
    programs: int = 0  # conic programs solved for them (0 for closed forms)
    failures: int = 0
    fallbacks: int = 0
    seconds: float = 0.0


class Acquisition(torch.nn.Module):
    """alpha(x) for a batch of unit-box decisions [b, d_x] -> [b]."""

    def __init__(self, radius: float = math.nan) -> None:
        super().__init__()
        self.radius = radius
        self.telemetry = InnerTelemetry()

    @abc.abstractmethod
    def forward(self, x: Tensor) -> Tensor: ...

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """alpha(x) [b] and its x-gradient [b, d_x] without autograd, for an acquisition whose
        Adam step is one compiled call with its gradient in closed form (torch's autograd around
        it costs about as much as the call); None: Adam differentiates `forward`."""
        return None


def context_pairs(x: Tensor, contexts: Tensor) -> Tensor:
    """All pairs [x_i, c_j] as [b, N, d_x + d_c]."""
    b, n = x.shape[0], contexts.shape[0]
    return torch.cat([x.unsqueeze(1).expand(b, n, -1), contexts.unsqueeze(0).expand(b, n, -1)], dim=-1)


# Options are science: the methods' hyperparameters and the published code's faults (the
# profiles). How a number is computed is no option: wdrbo_dist/models/settings.py's NumericalSettings.
COMMON_OPTIONS: dict[str, Option] = {
    "beta": Option.same(1.5, "the sigma multiplier of the UCB (method §1.5)"),
    # method §1.6: the paper profile clamps the Adam parameter into the box at every step; the
    # published code (BoTorch's gen_candidates_torch) evaluates a clamped copy and lets the
    # parameter itself leave the box.
    "adam_projected": Option(True, False, "Adam's parameter clamped into the box at every step (method §1.6)"),
}


def _settings_options(settings: OptimizerSettings) -> dict[str, Option]:
    return {
        "num_restarts": Option.same(settings.num_restarts, "Adam restarts from the best screened points"),
        "raw_samples": Option.same(settings.raw_samples, "Sobol points screened for the restarts"),
        "batch_limit": Option.same(settings.batch_limit, "candidates per acquisition call while screening"),
    }


class Algorithm(abc.ABC):
    """A BO algorithm: its surrogate inputs, its acquisition, its optimiser setting."""

    name: ClassVar[str]  # the registry key, used in configs and run keys
    display_name: ClassVar[str]  # as the paper writes it: tables, figures, the dashboard
    colour: ClassVar[str | None] = None  # its colour in every figure (None: one of a spare palette)
    description: ClassVar[str]
    uses_context: ClassVar[bool] = True  # GP on [x, c] (False: on x only, GP-UCB)
    settings: ClassVar[OptimizerSettings] = STANDARD
    relative_cost: ClassVar[float] = 1.0  # expected run time relative to ERBO (scheduling)
    OPTIONS: ClassVar[dict[str, Option]] = {}  # this algorithm's own options (see options.py)

    def __init__(self, problem: Problem, fidelity: str, options: Mapping[str, Any] | None = None) -> None:
        self.problem = problem
        self.fidelity = fidelity
        self.options = self.resolve_options(fidelity, options or {})

    @classmethod
    def cost_estimate(cls, options: Mapping[str, Any]) -> float:
        """Expected run time relative to ERBO with these resolved options (longest-first scheduling)."""
        return cls.relative_cost

    @classmethod
    def declared_options(cls) -> dict[str, Option]:
        """Every option this algorithm takes: the common ones, the optimiser's, its own."""
        return {**COMMON_OPTIONS, **_settings_options(cls.settings), **cls.OPTIONS}

    @classmethod
    def read_options(cls) -> dict[str, Option]:
        """The options that change what this algorithm does (what `wdrbo-dist list` shows)."""
        return cls.declared_options()

    @classmethod
    def check_option(cls, name: str, value: Any) -> OptionValue:
        """`value` as option `name` stores it; ValueError naming the option and what it takes."""
        declared = cls.declared_options()
        if name not in declared:
            raise ValueError(
                f"unknown option {name!r} for algorithm {cls.name!r}; allowed: {', '.join(sorted(declared))}"
            )
        try:
            return declared[name].check(value)
        except ValueError as exc:
            raise ValueError(f"option {name!r} of algorithm {cls.name!r} {exc}") from None

    @classmethod
    def resolve_options(cls, fidelity: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """The profile's defaults overridden by `given`; unknown names or bad values raise."""
        resolved = {name: option.default(fidelity) for name, option in cls.declared_options().items()}
        for name in sorted(given):
            resolved[name] = cls.check_option(name, given[name])
        return resolved

    def optimizer_settings(self) -> OptimizerSettings:
        o = self.options
        return OptimizerSettings(
            num_restarts=max(1, int(o["num_restarts"])),
            raw_samples=max(1, int(o["raw_samples"])),
            batch_limit=max(1, int(o["batch_limit"])),
            project_parameter=bool(o["adam_projected"]),
        )

    def setup(self, state: BOState, generator: torch.Generator) -> None:
        """Called once after the initial design (e.g. WDRBO draws its Lipschitz points)."""

    @abc.abstractmethod
    def acquisition(self, model: GaussianProcess, state: BOState, generator: torch.Generator) -> Acquisition:
        """The acquisition of this step, for a model fitted on this step's data."""


__all__ = [
    "Acquisition",
    "Algorithm",
    "BOState",
    "CHEAP",
    "InnerTelemetry",
    "STANDARD",
    "context_pairs",
]

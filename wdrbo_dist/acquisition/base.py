"""What every algorithm provides to the BO loop, and how its options are declared.

An `Algorithm` is built once per run (with the resolved options of its fidelity profile) and
asked, at every BO step, for an `Acquisition`: a module whose forward maps candidate
decisions [b, d_x] (in the unit box) to values [b] (in standardised-y units, spec 1.4).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from wdrbo_dist.acquisition.optimize import CHEAP, STANDARD, OptimizerSettings
from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.problems.base import Problem

OptionDefaults = dict[str, tuple[Any, Any]]  # name -> (paper default, reference default)


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


def context_pairs(x: Tensor, contexts: Tensor) -> Tensor:
    """All pairs [x_i, c_j] as [b, N, d_x + d_c]."""
    b, n = x.shape[0], contexts.shape[0]
    return torch.cat([x.unsqueeze(1).expand(b, n, -1), contexts.unsqueeze(0).expand(b, n, -1)], dim=-1)


COMMON_OPTIONS: OptionDefaults = {
    "beta": (1.5, 1.5),  # the sigma multiplier of the UCB (spec 1.5)
    # spec 1.6: the paper profile clamps the Adam parameter into the box at every step; the
    # published code (BoTorch's gen_candidates_torch) evaluates a clamped copy and lets the
    # parameter itself leave the box.
    "adam_projected": (True, False),
}


def _settings_options(settings: OptimizerSettings) -> OptionDefaults:
    return {
        "num_restarts": (settings.num_restarts, settings.num_restarts),
        "raw_samples": (settings.raw_samples, settings.raw_samples),
        "batch_limit": (settings.batch_limit, settings.batch_limit),
    }


class Algorithm(abc.ABC):
    """A BO algorithm: its surrogate inputs, its acquisition, its optimiser setting."""

    name: ClassVar[str]
    description: ClassVar[str]
    uses_context: ClassVar[bool] = True  # GP on [x, c] (False: on x only, GP-UCB)
    settings: ClassVar[OptimizerSettings] = STANDARD
    relative_cost: ClassVar[float] = 1.0  # expected run time relative to ERBO (scheduling)
    OPTIONS: ClassVar[OptionDefaults] = {}
    # A default that depends on other options, said where `wdrbo-dist list` shows the option.
    OPTION_NOTES: ClassVar[dict[str, str]] = {}

    def __init__(self, problem: Problem, fidelity: str, options: Mapping[str, Any] | None = None) -> None:
        self.problem = problem
        self.fidelity = fidelity
        self.options = self.resolve_options(fidelity, options or {})

    @classmethod
    def cost_estimate(cls, fidelity: str, options: Mapping[str, Any]) -> float:
        """Expected run time relative to ERBO with these options (for longest-first scheduling)."""
        return cls.relative_cost

    @classmethod
    def option_defaults(cls) -> OptionDefaults:
        return {**COMMON_OPTIONS, **_settings_options(cls.settings), **cls.OPTIONS}

    @classmethod
    def resolve_options(cls, fidelity: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """The profile's defaults overridden by `given`; unknown names or wrong types raise."""
        defaults = cls.option_defaults()
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise ValueError(
                f"unknown option {unknown[0]!r} for algorithm {cls.name!r}; allowed: {', '.join(sorted(defaults))}"
            )
        column = 0 if fidelity == "paper" else 1
        resolved = {name: pair[column] for name, pair in defaults.items()}
        for name, value in given.items():
            expected = type(resolved[name])
            ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok = float(value), True
            if not ok:
                raise ValueError(
                    f"option {name!r} of algorithm {cls.name!r} must be a {expected.__name__}, got {value!r}"
                )
            if expected in (int, float) and value < 0:
                raise ValueError(f"option {name!r} of algorithm {cls.name!r} must be >= 0, got {value!r}")
            resolved[name] = value
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

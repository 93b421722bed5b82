"""Problems layer: one module per test-problem family and the registry (`PROBLEMS`): a new problem is
one module plus one line here. Imports nothing of the package: no GP, no algorithm.
"""

from __future__ import annotations

from typing import cast

from wdrbo_dist.problems.ackley import Ackley
from wdrbo_dist.problems.base import (
    FIDELITIES, CentreDistribution, Fidelity, Observation, Problem, missing_constants,
)
from wdrbo_dist.problems.branin import ModifiedBranin
from wdrbo_dist.problems.camel import SixHumpCamel, ThreeHumpCamel
from wdrbo_dist.problems.hartmann import Hartmann
from wdrbo_dist.problems.newsvendor import Newsvendor
from wdrbo_dist.problems.portfolio import PortfolioNormal, PortfolioUniform
from wdrbo_dist.problems.toy import ToyGeneral


def registry(*classes: type[Problem]) -> dict[str, type[Problem]]:
    """name -> class; a class that lacks a constant every problem declares is refused here."""
    for cls in classes:
        if missing := missing_constants(cls):
            raise TypeError(f"problem class {cls.__name__} does not declare {', '.join(missing)}")
    return {cls.name: cls for cls in classes}


PROBLEMS: dict[str, type[Problem]] = registry(
    Ackley, Hartmann, ModifiedBranin, Newsvendor, PortfolioUniform, PortfolioNormal, ThreeHumpCamel,
    SixHumpCamel, ToyGeneral,
)


def register_problem(cls: type[Problem]) -> type[Problem]:
    """Add a problem class defined outside this package (usable as a class decorator)."""
    PROBLEMS.update(registry(cls))
    return cls


def problem_names() -> list[str]:
    """The registered problem names, in registry order."""
    return list(PROBLEMS)


def make_problem(name: str, fidelity: str = "paper") -> Problem:
    """A fresh instance of the problem registered as `name`, in fidelity profile "paper" or
    "reference" (anything else raises ValueError)."""
    try:
        cls = PROBLEMS[name]
    except KeyError:
        raise ValueError(f"unknown problem {name!r}; allowed: {', '.join(PROBLEMS)}") from None
    return cls(cast(Fidelity, fidelity))  # Problem.__init__ validates the profile


__all__ = [
    "FIDELITIES",
    "PROBLEMS",
    "CentreDistribution",
    "Fidelity",
    "Observation",
    "Problem",
    "make_problem",
    "problem_names",
    "register_problem",
]

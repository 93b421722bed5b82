"""The algorithm registry: name -> algorithm class. Adding an algorithm is one module plus one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wdrbo_dist.acquisition.base import Algorithm
from wdrbo_dist.acquisition.drbo_kde import DRBOKDE
from wdrbo_dist.acquisition.drbo_mmd import DRBOMMD
from wdrbo_dist.acquisition.mmd_minimax import DRBOMMDMinimax
from wdrbo_dist.acquisition.model_free import RandomSearch
from wdrbo_dist.acquisition.sbo_kde import SBOKDE
from wdrbo_dist.acquisition.stableopt import StableOpt
from wdrbo_dist.acquisition.ucb import GPUCB
from wdrbo_dist.acquisition.wdrbo import ERBO, WDRBO
from wdrbo_dist.problems.base import Problem

REQUIRED_CONSTANTS = ("name", "display_name", "description")


def registry(*classes: type[Algorithm]) -> dict[str, type[Algorithm]]:
    """name -> class, in the order of the paper's tables; an undeclared constant is refused here."""
    for cls in classes:
        if missing := [constant for constant in REQUIRED_CONSTANTS if not hasattr(cls, constant)]:
            raise TypeError(f"algorithm class {cls.__name__} does not declare {', '.join(missing)}")
    return {cls.name: cls for cls in classes}


ALGORITHMS: dict[str, type[Algorithm]] = registry(
    WDRBO, ERBO, GPUCB, SBOKDE, DRBOKDE, DRBOMMD, DRBOMMDMinimax, StableOpt, RandomSearch,
)


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Add an algorithm class defined outside this package (usable as a class decorator)."""
    ALGORITHMS.update(registry(cls))
    return cls


def get_algorithm_class(name: str) -> type[Algorithm]:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}") from None


def make_algorithm(name: str, problem: Problem, fidelity: str, options: Mapping[str, Any] | None = None) -> Algorithm:
    return get_algorithm_class(name)(problem, fidelity, options)

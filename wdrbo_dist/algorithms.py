"""The algorithm registry: name -> algorithm class. Adding an algorithm is one module plus one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wdrbo_dist.acquisition.base import Algorithm
from wdrbo_dist.acquisition.drbo_kde import DRBOKDE
from wdrbo_dist.acquisition.drbo_mmd import DRBOMMD
from wdrbo_dist.acquisition.mmd_minimax import DRBOMMDMinimax
from wdrbo_dist.acquisition.sbo_kde import SBOKDE
from wdrbo_dist.acquisition.stableopt import StableOpt
from wdrbo_dist.acquisition.ucb import GPUCB
from wdrbo_dist.acquisition.wdrbo import ERBO, WDRBO
from wdrbo_dist.problems.base import Problem

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls
    for cls in (
        WDRBO,
        ERBO,
        GPUCB,
        SBOKDE,
        DRBOKDE,
        DRBOMMD,
        DRBOMMDMinimax,
        StableOpt,
    )
}


def algorithm_names() -> list[str]:
    return list(ALGORITHMS)


def get_algorithm_class(name: str) -> type[Algorithm]:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; allowed: {', '.join(ALGORITHMS)}") from None


def make_algorithm(name: str, problem: Problem, fidelity: str, options: Mapping[str, Any] | None = None) -> Algorithm:
    return get_algorithm_class(name)(problem, fidelity, options)

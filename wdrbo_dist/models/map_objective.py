"""The GP's MAP objective's priors, BoTorch's of method §1.4, and its bounds; the objective,
-(log N(y | m, K + s2 I) + log priors) / n with its analytic gradient: compiled_fit.py."""

from __future__ import annotations

import math


LENGTHSCALE_MIN = 0.025
NOISE_MIN = 1e-4
NOISE_PRIOR = (-4.0, 1.0)
FAILED_OBJECTIVE = 1e10  # the MAP objective's value where K is not positive definite or a value is not finite


def lengthscale_prior(dim: int) -> tuple[float, float]:
    """BoTorch's dimension-scaled LogNormal lengthscale prior (loc, scale)."""
    return math.sqrt(2.0) + 0.5 * math.log(dim), math.sqrt(3.0)

"""Gaussian-KDE samples of the observed contexts (method §3.4), shared by SBO-KDE and DRBO-KDE.

Silverman's rule per context dimension, h_k = (4/(d+2))^{1/(d+4)} n^{-1/(d+4)} sd_k with the
population (ddof 0) std; sampling picks observed contexts uniformly with replacement and adds
N(0, h_k^2) noise, then clamps to the context box (mass piles up on the bounds: a censored,
not a truncated, KDE, as in the reference). The reference draws from NumPy's global RNG; here
every draw comes from the run's generator.
"""

from __future__ import annotations

import torch
from torch import Tensor


def silverman_bandwidth(contexts: Tensor) -> Tensor:
    """Per-dimension bandwidth [d_c] of Silverman's rule of thumb (population std)."""
    n, d = contexts.shape
    sd = contexts.std(dim=0, correction=0) if n > 1 else torch.zeros(d, dtype=contexts.dtype)
    factor = (4.0 / (d + 2)) ** (1.0 / (d + 4)) * n ** (-1.0 / (d + 4))
    return factor * sd


def kde_samples(contexts: Tensor, count: int, bounds: Tensor, generator: torch.Generator) -> Tensor:
    """`count` draws [count, d_c] (float64, CPU) from the clamped Gaussian KDE of `contexts`."""
    contexts = contexts.detach().to("cpu", torch.float64)
    bounds = bounds.to("cpu", torch.float64)
    n, d = contexts.shape
    index = torch.randint(0, n, (count,), generator=generator)
    noise = torch.randn(count, d, generator=generator, dtype=torch.float64)
    samples = contexts[index] + noise * silverman_bandwidth(contexts)
    return torch.maximum(torch.minimum(samples, bounds[1]), bounds[0])

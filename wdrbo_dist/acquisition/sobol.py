"""Scrambled Sobol points, the same bits as torch's `SobolEngine(dim, scramble=True, seed)`
drawn once, in one compiled call instead of an engine per draw.

StableOpt redraws its 1024 box contexts at every Adam step and DRBO-KDE its m(x) samples at
every call, where building the engine took about a tenth of a StableOpt Adam step. The comment
above `scrambled_sobol` says how the engine's bits are reproduced; `tests/acquisition/test_sobol.py`
holds it to the engine, bit for bit.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor


def draw_seed(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator))


# StableOpt redraws its 1024 box contexts at every Adam step and DRBO-KDE its m(x) samples at
# every call, where building the engine (a dozen tensor calls, its scramble's triple loop) took
# about 0.3 ms, a tenth of a StableOpt Adam step. The engine takes its random bits from a fresh
# torch generator seeded with the drawn seed: a standard 32-bit Mersenne Twister, whose outputs'
# lowest bits `torch.randint(2, ...)` keeps in order (first the shift's bits, then the scramble
# matrices'). `sobol_kernel.scrambled_points` runs that generator, the scramble and the
# Gray-code draw; the direction numbers come from an unscrambled engine once per dimension.
# numba is imported at the first draw. `tests/acquisition/test_sobol.py` holds it to the
# engine, bit for bit.
def scrambled_sobol(n: int, dim: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """`n` points [n, dim] of a Sobol sequence scrambled with a seed drawn from `generator`
    (CPU): a random digital shift and a random lower-triangular (Matousek) scramble of the
    direction numbers, as the engine draws them."""
    from wdrbo_dist.acquisition.sobol_kernel import scrambled_points

    if n < 1:
        raise ValueError(f"scrambled_sobol draws n >= 1 points, got n={n}")
    # The engine's first point is its shift divided in torch's default dtype.
    first_in_float32 = torch.get_default_dtype() == torch.float32
    points = scrambled_points(draw_seed(generator), n, _direction_numbers(dim), first_in_float32)
    return torch.from_numpy(points).to(dtype)


@functools.lru_cache(maxsize=None)
def _direction_numbers(dim: int) -> np.ndarray:
    """The engine's unscrambled direction numbers [dim, sobol_kernel.BITS] (read-only)."""
    array = torch.quasirandom.SobolEngine(dim, scramble=False).sobolstate.numpy().copy()
    array.flags.writeable = False
    return array

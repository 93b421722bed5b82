"""The compiled half of `sobol.scrambled_sobol`: the engine's generator, scramble and draw."""

from __future__ import annotations

import numpy as np
from numba import njit

BITS = 30  # the engine's MAXBIT: points are k / 2^30
_STATE_SIZE, _SHIFT_POINT = 624, 397  # MT19937's n and m


@njit(cache=True)
def scrambled_points(seed, n, directions, first_in_float32):  # type: ignore[no-untyped-def]
    """[n, dim] float64: the engine's points k / 2^BITS for a generator seeded with `seed`."""
    dim = directions.shape[0]
    state = np.empty(_STATE_SIZE, np.uint32)
    state[0] = np.uint32(seed & 0xFFFFFFFF)
    for i in range(1, _STATE_SIZE):
        previous = np.uint64(state[i - 1])
        state[i] = np.uint32((np.uint64(1812433253) * (previous ^ (previous >> np.uint64(30))) + np.uint64(i))
                             & np.uint64(0xFFFFFFFF))
    bits = np.empty(dim * BITS * (1 + BITS), np.int64)  # the outputs' lowest bits, in order
    used = _STATE_SIZE
    for k in range(bits.size):
        if used == _STATE_SIZE:
            _twist(state)
            used = 0
        y = np.uint32(state[used])
        used += 1
        y ^= y >> np.uint32(11)
        y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
        y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
        y ^= y >> np.uint32(18)
        bits[k] = np.int64(y & np.uint32(1))
    shifts = np.zeros(dim, np.int64)
    scrambled = np.zeros((dim, BITS), np.int64)
    for d in range(dim):
        for k in range(BITS):
            shifts[d] += bits[d * BITS + k] << k
        # Row p of the unit-diagonal lower-triangular matrix M_d (its column k weighs bit
        # BITS-1-k): bit BITS-1-p of a scrambled direction is the parity of row p & direction.
        start = dim * BITS + d * BITS * BITS
        for p in range(BITS):
            row = np.int64(1) << (BITS - 1 - p)
            for k in range(p):
                row |= bits[start + p * BITS + k] << (BITS - 1 - k)
            for j in range(BITS):
                shared = row & directions[d, j]
                parity = 0
                while shared:
                    parity ^= 1
                    shared &= shared - 1
                scrambled[d, j] |= np.int64(parity) << (BITS - 1 - p)
    points = np.empty((n, dim))
    scale = 1.0 / (1 << BITS)
    for d in range(dim):
        quasi = shifts[d]
        points[0, d] = np.float64(np.float32(quasi)) * scale if first_in_float32 else quasi * scale
        for i in range(1, n):
            k = i - 1  # the Gray code flips the lowest zero bit of k
            bit = 0
            while k & 1:
                k >>= 1
                bit += 1
            quasi ^= scrambled[d, bit]
            points[i, d] = quasi * scale
    return points


@njit(cache=True)
def _twist(state):  # type: ignore[no-untyped-def]
    """MT19937's next block of 624 words, in place."""
    upper, lower, matrix = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
    for i in range(_STATE_SIZE):
        y = (state[i] & upper) | (state[(i + 1) % _STATE_SIZE] & lower)
        value = state[(i + _SHIFT_POINT) % _STATE_SIZE] ^ (y >> np.uint32(1))
        if y & np.uint32(1):
            value ^= matrix
        state[i] = value

"""`exp_in_place`, the fresh-context kernels' polynomial exponential: within 1 ulp of NumPy's
(libm's) exp, and the same bits on any CPU."""

from __future__ import annotations

import numpy as np
import pytest

from wdrbo_dist.models.ucb_kernels import exp_in_place


@pytest.mark.parametrize("lowest", [-1.0, -40.0, -708.0])
def test_it_is_within_one_ulp_of_libms_exp(lowest: float) -> None:
    x = np.random.default_rng(int(-lowest)).uniform(lowest, 0.0, 1_000_000)
    x[:4] = [0.0, -0.0, -1e-300, lowest]
    values = x.copy()
    exp_in_place(values)
    expected = np.exp(x)
    ulps = np.abs(values - expected) / np.spacing(expected)
    assert ulps.max() <= 1.0
    assert 0.0 < (values != expected).mean() < 0.3  # another function: it does differ, by rounding
    assert values[0] == values[1] == 1.0


def test_below_the_smallest_it_is_zero_where_libms_is_below_3e_308() -> None:
    x = np.array([-708.5, -745.0, -1e4, -np.inf])
    values = x.copy()
    exp_in_place(values)
    assert np.all(values == 0.0) and np.all(np.exp(x) < 3.3e-308)


def test_its_bits_are_those_of_its_operations_each_rounded_so_no_cpu_fuses_them() -> None:
    from wdrbo_dist.models import ucb_kernels as kernel

    x = np.random.default_rng(5).uniform(-708.0, 0.0, 100_000)
    values = x.copy()
    exp_in_place(values)
    rounded = x * kernel._INVERSE_LN2 + kernel._ROUNDING_SHIFT  # NumPy: every operation rounded apart
    k = rounded - kernel._ROUNDING_SHIFT
    r = (x - k * kernel._LN2_HIGH) - k * kernel._LN2_LOW
    p = np.full_like(r, 1.0 / 6227020800.0)
    for factorial in (479001600.0, 39916800.0, 3628800.0, 362880.0, 40320.0, 5040.0, 720.0, 120.0, 24.0, 6.0, 2.0):
        p = p * r + 1.0 / factorial
    p = (p * r + 1.0) * r + 1.0
    scale = ((rounded.view(np.int64) - kernel._ROUNDING_SHIFT_BITS + 1023) << 52).view(np.float64)
    assert np.array_equal(values, p * scale)

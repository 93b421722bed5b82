"""`scrambled_sobol` draws the points torch's scrambled `SobolEngine` draws, bit for bit."""

from __future__ import annotations

import pytest
import torch

from wdrbo_dist.acquisition.sobol import draw_seed, scrambled_sobol


def engine_points(n: int, dim: int, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    engine = torch.quasirandom.SobolEngine(dimension=dim, scramble=True, seed=draw_seed(generator))
    return engine.draw(n, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("dim", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [1, 2, 5, 64, 1000, 2048])
def test_the_points_are_the_engines_to_the_bit(n: int, dim: int, dtype: torch.dtype) -> None:
    for seed in range(25):
        expected = engine_points(n, dim, torch.Generator().manual_seed(seed), dtype)
        drawn = scrambled_sobol(n, dim, torch.Generator().manual_seed(seed), dtype)
        assert drawn.dtype == expected.dtype and drawn.shape == expected.shape
        assert torch.equal(drawn, expected), (seed, (drawn != expected).nonzero()[:3])


def test_the_first_point_follows_torchs_default_dtype_as_the_engine_does() -> None:
    previous = torch.get_default_dtype()
    try:
        for default in (torch.float64, torch.float32):
            torch.set_default_dtype(default)
            for seed in range(20):
                expected = engine_points(3, 2, torch.Generator().manual_seed(seed), torch.float64)
                assert torch.equal(scrambled_sobol(3, 2, torch.Generator().manual_seed(seed)), expected)
    finally:
        torch.set_default_dtype(previous)


def test_the_callers_generator_moves_on_as_with_the_engine() -> None:
    ours, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    scrambled_sobol(16, 2, ours)
    engine_points(16, 2, theirs, torch.float64)
    assert torch.equal(ours.get_state(), theirs.get_state())


def test_no_points_is_an_error_not_a_write_past_the_array() -> None:
    with pytest.raises(ValueError, match="n >= 1"):
        scrambled_sobol(0, 2, torch.Generator().manual_seed(0))

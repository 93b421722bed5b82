"""The optimiser of method §1.6: Sobol screening, Boltzmann starts, Adam with the EMA stopping rule."""

from __future__ import annotations

import math

import pytest
import torch

from wdrbo_dist.acquisition.optimize import (
    CHEAP,
    STANDARD,
    AdamUpdate,
    MovingAverageStop,
    OptimizerSettings,
    adam_ascent,
    boltzmann_starts,
    maximize_acquisition,
)
from wdrbo_dist.acquisition.sobol import scrambled_sobol

BOX = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def bowl(x: torch.Tensor) -> torch.Tensor:
    return -((x - torch.tensor([0.3, 0.8], dtype=x.dtype)) ** 2).sum(-1)


def test_finds_the_maximum_of_a_smooth_function() -> None:
    x, value, stats = maximize_acquisition(bowl, BOX, STANDARD, torch.Generator().manual_seed(0))
    assert torch.allclose(x, torch.tensor([0.3, 0.8], dtype=torch.float64), atol=2e-2)
    assert value > -1e-3
    assert stats.adam_steps >= 11  # the stopping rule needs a full window first
    assert stats.acquisition_calls == 2 + stats.adam_steps + 1  # 1024 raw in 2 chunks, steps, final


def test_respects_the_bounds_when_the_maximum_is_outside() -> None:
    x, _, _ = maximize_acquisition(lambda z: z.sum(-1), BOX, CHEAP, torch.Generator().manual_seed(0))
    assert bool(((x >= 0) & (x <= 1)).all())
    assert torch.allclose(x, torch.ones(2, dtype=torch.float64), atol=1e-9)


def test_same_generator_seed_same_answer() -> None:
    settings = OptimizerSettings(num_restarts=4, raw_samples=64, batch_limit=32)
    a = maximize_acquisition(bowl, BOX, settings, torch.Generator().manual_seed(5))
    b = maximize_acquisition(bowl, BOX, settings, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and a[1] == b[1]


def test_boltzmann_starts_always_contain_the_best_raw_point() -> None:
    g = torch.Generator().manual_seed(1)
    raw = scrambled_sobol(256, 2, g)
    values = bowl(raw)
    for seed in range(20):
        starts = boltzmann_starts(raw, values, 5, 1.0, torch.Generator().manual_seed(seed))
        assert starts.shape == (5, 2)
        assert any(torch.equal(s, raw[values.argmax()]) for s in starts)


def test_boltzmann_starts_with_equal_or_nonfinite_values_pick_distinct_points() -> None:
    raw = scrambled_sobol(32, 2, torch.Generator().manual_seed(0))
    for values in (torch.zeros(32, dtype=torch.float64), torch.full((32,), float("nan"), dtype=torch.float64)):
        starts = boltzmann_starts(raw, values, 6, 1.0, torch.Generator().manual_seed(0))
        assert len({tuple(s.tolist()) for s in starts}) == 6


def _tilted_bowl(x: torch.Tensor) -> torch.Tensor:
    """A maximum outside the box at (1.15, 0.4): paths run into the bound x_0 = 1."""
    return -((x - torch.tensor([1.15, 0.4], dtype=x.dtype)) ** 2).sum(-1) + 0.3 * torch.sin(7 * x[..., 1])


def test_unprojected_ascent_is_botorchs_gen_candidates_torch() -> None:
    """The reference profile's optimiser (method §1.6) follows BoTorch's own loop step by step:
    the acquisition sees a clamped copy, the Adam parameter moves freely."""
    from botorch.generation.gen import gen_candidates_torch

    starts = scrambled_sobol(6, 2, torch.Generator().manual_seed(3))
    settings = OptimizerSettings(num_restarts=6, raw_samples=6, batch_limit=6, project_parameter=False)
    ours, values, _ = adam_ascent(_tilted_bowl, starts, BOX, settings)
    theirs, their_values = gen_candidates_torch(
        initial_conditions=starts.unsqueeze(1),
        acquisition_function=lambda x: _tilted_bowl(x.squeeze(-2)),
        lower_bounds=BOX[0],
        upper_bounds=BOX[1],
    )
    assert torch.equal(ours, theirs.squeeze(1).detach())
    assert torch.equal(values, their_values.detach())


def test_a_free_parameter_that_overshoots_the_bound_stops_there() -> None:
    """BoTorch's loop (the reference profile): Adam's momentum carries the parameter past the
    bound, the clamped copy's value stops changing and the stopping rule fires at the bound,
    short of the interior maximum at 0.97. The paper profile's in-place clamp reaches it."""
    bowl_at = lambda x: -((x - torch.tensor([0.97, 0.5], dtype=x.dtype)) ** 2).sum(-1)  # noqa: E731
    start = torch.tensor([[0.85, 0.5]], dtype=torch.float64)
    projected, _, _ = adam_ascent(bowl_at, start, BOX, OptimizerSettings(1, 1, 1))
    free, _, _ = adam_ascent(bowl_at, start, BOX, OptimizerSettings(1, 1, 1, project_parameter=False))
    assert abs(float(projected[0, 0]) - 0.97) < 0.02
    assert float(free[0, 0]) == 1.0


def test_adam_update_is_torchs_adam_to_the_bit() -> None:
    """The optimiser's own Adam is torch.optim.Adam's arithmetic, on gradients of any scale."""
    generator = torch.Generator().manual_seed(0)
    start = torch.rand(10, 3, dtype=torch.float64, generator=generator)
    theirs, ours = start.clone().requires_grad_(True), start.clone().requires_grad_(True)
    adam, update = torch.optim.Adam([theirs], lr=0.025), AdamUpdate(ours, lr=0.025)
    for _ in range(500):
        scale = 10.0 ** float(torch.randint(-9, 4, (1,), generator=generator))
        grad = scale * torch.randn(10, 3, dtype=torch.float64, generator=generator)
        theirs.grad = grad.clone()
        adam.step()
        update.step(grad)
        assert torch.equal(ours, theirs)


def test_the_stopping_rules_window_mean_is_torchs_reduction_to_the_bit() -> None:
    """The weighted mean of a window, summed in Python floats, is torch's float64 sum of the
    weighted window on this machine, for losses of any sign and scale, zeros and non-finite ones."""
    stop = MovingAverageStop(maxiter=10, n_window=10, rel_tol=1e-5)
    assert stop.lanes in (4, 8), "the Python sum should reproduce torch's on x86 builds"
    generator = torch.Generator().manual_seed(3)
    for trial in range(3000):
        window = torch.randn(10, dtype=torch.float64, generator=generator) * 10.0 ** (trial % 19 - 9)
        if trial % 7 == 0:
            window[int(trial) % 10] = (float("nan"), float("inf"), -float("inf"), 0.0, -0.0)[trial % 5]
        expected = float((window * stop.weights).sum(dim=0))
        got = stop._window_mean(window.tolist())
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (trial, got, expected)
        assert math.copysign(1.0, got) == math.copysign(1.0, expected) or math.isnan(got)


@pytest.mark.parametrize("sign", [1.0, -1.0, 0.0])
def test_moving_average_stop_is_botorchs_stopping_rule(sign: float) -> None:
    """Same decision at every step as BoTorch's ExpMAStoppingCriterion, for losses that fall,
    rise, stay at zero (its division by zero) or turn non-finite."""
    from botorch.optim.stopping import ExpMAStoppingCriterion

    generator = torch.Generator().manual_seed(1)
    for trial in range(20):
        theirs = ExpMAStoppingCriterion(maxiter=400, minimize=True, n_window=10, rel_tol=1e-5)
        ours = MovingAverageStop(maxiter=400, n_window=10, rel_tol=1e-5)
        for step in range(400):
            noise = float(torch.randn(1, generator=generator, dtype=torch.float64)) * 10.0 ** -(trial % 8)
            loss = sign * (1.0 / (step + 1) + noise)
            if trial == 19 and step == 30:
                loss = float("nan")
            decision = theirs(torch.tensor(loss, dtype=torch.float64))
            assert ours(loss) == decision, (trial, step)
            if decision:
                break

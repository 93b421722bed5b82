"""sample_context and observe: shapes, bounds, determinism, only the given generator, moments."""

from __future__ import annotations

import math

import pytest
import torch

from wdrbo_dist.problems import problem_names

N = 20_000


def clamped_normal_mean(mu: float, sigma: float) -> float:
    """E[clamp(X, 0, 1)] for X ~ N(mu, sigma^2) (censoring)."""
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    a, b = (0 - mu) / sigma, (1 - mu) / sigma
    return mu * (cdf(b) - cdf(a)) + sigma * (phi(a) - phi(b)) + (1 - cdf(b))


def burr_mean(c: float, d: float) -> float:
    """E[X] for Burr XII(c, d): d B(d - 1/c, 1 + 1/c)."""
    return d * math.exp(math.lgamma(d - 1 / c) + math.lgamma(1 + 1 / c) - math.lgamma(d + 1))


# (law mean, law std upper bound, clamped to [0, 1]?)
LAWS = {
    "ackley": (clamped_normal_mean(0.5, 0.2), 0.2, True),
    "hartmann": (clamped_normal_mean(0.5, 0.2), 0.2, True),
    "modified-branin": (clamped_normal_mean(0.5, 0.2), 0.2, True),
    "newsvendor": (burr_mean(2, 20), 0.2, False),  # the learner sees the unclamped demand
    "portfolio-uniform": (0.5, 0.3, True),
    "portfolio-normal": (clamped_normal_mean(0.5, 0.2), 0.2, True),
    "three-hump-camel": (clamped_normal_mean(0.5, 0.2), 0.2, True),
    "six-hump-camel": (clamped_normal_mean(0.6, 0.2), 0.2, True),
    "toy-general": (0.6, 0.2, False),  # N(0.6, 0.2^2), not clipped
}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", problem_names())
def test_sample_context(get_problem, name: str) -> None:
    p = get_problem(name)
    mean, std, clamped = LAWS[name]
    global_state = torch.get_rng_state()
    c = p.sample_context(N, gen(7))
    assert torch.equal(torch.get_rng_state(), global_state), "touched the global RNG"
    assert c.shape == (N, p.dim_c) and c.dtype == torch.float64 and c.device.type == "cpu"
    assert bool(torch.isfinite(c).all())
    if clamped:
        assert bool(((c >= 0) & (c <= 1)).all())
    assert torch.equal(p.sample_context(N, gen(7)), c)
    assert not torch.equal(p.sample_context(N, gen(8)), c)
    tol = 5 * std / math.sqrt(N)
    for j in range(p.dim_c):
        assert c[:, j].mean().item() == pytest.approx(mean, abs=tol)


def test_clamped_normal_censors(get_problem) -> None:
    """Mass beyond the bounds piles up on them (censoring, not truncation)."""
    c = get_problem("six-hump-camel").sample_context(N, gen(1))[:, 0]
    p_high = 0.5 * math.erfc((1 - 0.6) / 0.2 / math.sqrt(2))  # P(N(0.6, 0.2^2) > 1) = 0.0228
    frac = (c == 1.0).double().mean().item()
    assert frac == pytest.approx(p_high, abs=5 * math.sqrt(p_high / N))


def test_newsvendor_demand_law(get_problem) -> None:
    c = get_problem("newsvendor").sample_context(N, gen(3))[:, 0]
    assert bool((c >= 0).all())
    median = (2 ** (1 / 20) - 1) ** 0.5
    assert (c <= median).double().mean().item() == pytest.approx(0.5, abs=5 * 0.5 / math.sqrt(N))


def test_observe_uses_a_fresh_context_per_row(get_problem) -> None:
    p = get_problem("hartmann")
    x = torch.full((6, 5), 0.3, dtype=torch.float64)
    obs = p.observe(x, gen(11))
    assert obs.y.shape == (6,) and obs.context.shape == (6, 1)
    torch.testing.assert_close(obs.context, p.sample_context(6, gen(11)))
    torch.testing.assert_close(obs.y, p.evaluate(x, obs.context))
    assert obs.context.unique().numel() == 6


def test_newsvendor_observe_returns_unclamped_demand(get_problem) -> None:
    p = get_problem("newsvendor")
    x = torch.full((N, 1), 0.5, dtype=torch.float64)
    obs = p.observe(x, gen(4))
    torch.testing.assert_close(obs.context, p.sample_context(N, gen(4)))  # as drawn
    torch.testing.assert_close(obs.y, p.evaluate(x, obs.context.clamp(0, 1)))
    # f itself uses the clamped demand: a demand of 2 scores like a demand of 1.
    one, two = torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([[2.0]], dtype=torch.float64)
    assert p.evaluate(x[:1], two).item() == p.evaluate(x[:1], one).item()


def test_toy_context_is_not_clipped(get_problem) -> None:
    c = get_problem("toy-general").sample_context(N, gen(9))[:, 0]
    assert c.std().item() == pytest.approx(0.2, abs=0.01)
    assert bool((c < 0).any() or (c > 1).any())  # P(outside [0, 1]) ~ 2.3%

"""f and E against the test vectors of method §4, and the fast truth paths against the
plain QMC average of `evaluate` over the nodes."""

from __future__ import annotations

import math

import pytest
import torch

from wdrbo_dist.problems.common import chunked_mean

F64 = torch.float64


def t(*values: float) -> torch.Tensor:
    return torch.tensor([values], dtype=F64)


# (problem, fidelity, x, c, f(x, c)) from method §4.
F_VECTORS = [
    ("ackley", "paper", (0.3, 0.7), (0.45,), -18.850556),
    ("hartmann", "paper", (0.1, 0.2, 0.3, 0.4, 0.5), (0.6,), 1.406911),
    ("modified-branin", "paper", (0.3, 0.7), (0.4, 0.6), -39.382408),
    ("newsvendor", "paper", (0.3,), (0.2,), 0.4),
    ("newsvendor", "paper", (0.1,), (0.25,), 0.4),
    ("portfolio-uniform", "paper", (0.2, 0.5, 0.8), (0.3, 0.6), 1.283500),
    ("portfolio-normal", "paper", (0.2, 0.5, 0.8), (0.3, 0.6), 1.283500),
    ("three-hump-camel", "paper", (0.3,), (0.7,), -0.293803),
    ("six-hump-camel", "paper", (0.3,), (0.7,), -0.929621),
    ("six-hump-camel", "reference", (0.3,), (0.7,), -0.929621),  # observations never change
]

# (problem, fidelity, x, E_{P*} f(x, .)) from method §4.
E_VECTORS = [
    ("ackley", "paper", (0.3, 0.7), -19.292047),
    ("ackley", "paper", (0.5, 0.5), -12.531437),
    ("hartmann", "paper", (0.1, 0.2, 0.3, 0.4, 0.5), 1.005232),
    ("modified-branin", "paper", (0.3, 0.7), -39.370688),
    ("newsvendor", "paper", (0.3,), 0.305135),
    ("newsvendor", "paper", (0.1,), 0.349852),
    ("portfolio-uniform", "paper", (0.2, 0.5, 0.8), 4.247854),
    ("portfolio-normal", "paper", (0.2, 0.5, 0.8), 3.831732),
    ("three-hump-camel", "paper", (0.3,), -0.450218),
    ("six-hump-camel", "reference", (0.3,), -4.954665),
]


@pytest.mark.parametrize(("name", "fidelity", "x", "c", "want"), F_VECTORS)
def test_f_vectors(get_problem, name: str, fidelity: str, x, c, want: float) -> None:
    got = get_problem(name, fidelity).evaluate(t(*x), t(*c))
    assert got.shape == (1,) and got.dtype == F64
    assert got.item() == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize(("name", "fidelity", "x", "want"), E_VECTORS)
def test_e_vectors(get_problem, name: str, fidelity: str, x, want: float) -> None:
    got = get_problem(name, fidelity).expected_value(t(*x))
    assert got.shape == (1,) and got.dtype == F64
    assert got.item() == pytest.approx(want, abs=1e-5)


def test_modified_branin_arrangement(get_problem) -> None:
    """B(15 x1 - 5, 15 c1) * B(15 c2 - 5, 15 x2): swapping the roles changes the value."""
    p = get_problem("modified-branin")
    x, c = t(0.3, 0.7), t(0.4, 0.6)

    def b(a: float, bb: float) -> float:
        return (bb - 5.1 / (4 * math.pi**2) * a * a + 5 / math.pi * a - 6) ** 2 + 10 * (
            1 - 1 / (8 * math.pi)
        ) * math.cos(a) + 10

    want = -math.sqrt(b(15 * 0.3 - 5, 15 * 0.4) * b(15 * 0.6 - 5, 15 * 0.7))
    assert p.evaluate(x, c).item() == pytest.approx(want, rel=1e-14)


def test_six_hump_truth_depends_on_fidelity(get_problem) -> None:
    paper, reference = get_problem("six-hump-camel", "paper"), get_problem("six-hump-camel", "reference")
    x = torch.linspace(0, 1, 7, dtype=F64).unsqueeze(-1)
    # "paper" scores the observed function: its truth is the QMC mean of evaluate.
    brute = chunked_mean(paper.evaluate, x, paper.qmc_nodes())
    torch.testing.assert_close(paper.expected_value(x), brute, rtol=0, atol=1e-12)
    assert (paper.expected_value(x) - reference.expected_value(x)).abs().max() > 1.0
    assert paper.optimal_value == pytest.approx(0.38913, abs=1e-5)
    assert reference.optimal_value == pytest.approx(-3.01639, abs=1e-5)
    assert paper.optimal_x[0] == pytest.approx(0.4938, abs=1e-4)
    assert reference.optimal_x[0] == pytest.approx(0.4918, abs=1e-4)


@pytest.mark.parametrize("name", ["ackley", "hartmann", "portfolio-uniform", "portfolio-normal"])
def test_fast_truth_equals_plain_qmc_average(get_problem, name: str) -> None:
    """The rearranged truths compute the same QMC sum as averaging evaluate over the nodes."""
    p = get_problem(name)
    x = torch.rand(2, p.dim_x, generator=torch.Generator().manual_seed(3), dtype=F64)
    brute = chunked_mean(p.evaluate, x, p.qmc_nodes())
    torch.testing.assert_close(p.expected_value(x), brute, rtol=0, atol=1e-10)


def test_qmc_nodes(get_problem) -> None:
    sizes = {"ackley": 655_360, "hartmann": 65_536, "modified-branin": 65_536, "newsvendor": 65_536,
             "portfolio-uniform": 2_048, "portfolio-normal": 2_048, "three-hump-camel": 65_536,
             "six-hump-camel": 65_536}
    for name, n in sizes.items():
        p = get_problem(name)
        nodes = p.qmc_nodes()
        assert nodes.shape == (n, p.dim_c) and nodes.dtype == F64
        assert bool((nodes >= 0).all() and (nodes <= 1).all())
        assert nodes[0].tolist() == [0.0] * p.dim_c  # the Sobol origin (-inf clamps to 0)
        assert p.qmc_nodes() is nodes  # built once per instance


def test_normal_nodes_are_the_inverse_cdf_of_sobol(get_problem) -> None:
    p = get_problem("six-hump-camel")
    v = torch.quasirandom.SobolEngine(1, scramble=False).draw(65_536, dtype=F64)
    # For d_c = 1 and N = 2^16 the Sobol points are exactly {k / 2^16}.
    assert torch.equal(v.sort(0).values.squeeze(-1), torch.arange(65_536, dtype=F64) / 65_536)
    from statistics import NormalDist

    k = 12345
    want = min(max(NormalDist(0.6, 0.2).inv_cdf(v[k].item()), 0.0), 1.0)
    assert p.qmc_nodes()[k].item() == pytest.approx(want, abs=1e-12)


def test_newsvendor_nodes_are_burr_quantiles(get_problem) -> None:
    p = get_problem("newsvendor")
    v = torch.quasirandom.SobolEngine(1, scramble=False).draw(65_536, dtype=F64)[:, 0]
    want = ((1 - v) ** (-1 / 20) - 1).sqrt().clamp(0, 1)
    torch.testing.assert_close(p.qmc_nodes()[:, 0], want, rtol=0, atol=1e-12)  # naive pow loses digits


def test_three_hump_closed_form(get_problem) -> None:
    """E f = -(2a^2 - 1.05a^4 + a^6/6) - a E[b] - E[b^2] with the node moments of b = 2c - 1."""
    p = get_problem("three-hump-camel")
    b = 2 * p.qmc_nodes()[:, 0] - 1
    m1, m2 = b.mean().item(), b.square().mean().item()
    assert m1 == pytest.approx(-(2.0**-16), abs=1e-15)  # the unpaired node c = 0
    assert m2 == pytest.approx(0.15641, abs=1e-5)
    for x in (0.0, 0.3, 0.5, 0.9):
        a = 2 * x - 1
        want = -(2 * a**2 - 1.05 * a**4 + a**6 / 6) - a * m1 - m2
        assert p.expected_value(t(x)).item() == pytest.approx(want, abs=1e-13)


def test_newsvendor_closed_form(get_problem) -> None:
    """E pi(x) = 8 E[min(c, x)] - 4 x on the QMC nodes."""
    p = get_problem("newsvendor")
    c = p.qmc_nodes()[:, 0]
    for x in (0.05, 0.18, 0.4, 1.0):
        want = 8 * torch.minimum(c, torch.tensor(x, dtype=F64)).mean().item() - 4 * x
        assert p.expected_value(t(x)).item() == pytest.approx(want, abs=1e-13)


def test_toy_closed_form(get_problem) -> None:
    p = get_problem("toy-general")
    # a* = E|c - 0.5| under N(0.6, 0.2^2), by a fine trapezoid rule on +-10 sigma.
    c = torch.linspace(0.6 - 2.0, 0.6 + 2.0, 400_001, dtype=F64)
    dens = torch.exp(-0.5 * ((c - 0.6) / 0.2) ** 2) / (0.2 * math.sqrt(2 * math.pi))
    a_star = torch.trapezoid((c - 0.5).abs() * dens, c).item()
    assert a_star == pytest.approx(0.179119, abs=1e-6)
    x = torch.tensor([[-0.7], [-0.1], [0.0], [0.3]], dtype=F64)
    tt = x[:, 0].abs()
    want = 1 - a_star / (tt + 0.2) - torch.sqrt(tt + 0.05)
    torch.testing.assert_close(p.expected_value(x), want, rtol=0, atol=1e-9)
    assert p.evaluate(t(0.3), t(0.9)).item() == pytest.approx(1 - 0.4 / 0.5 - math.sqrt(0.35), abs=1e-15)
    # Even in x: both signs score alike.
    assert p.expected_value(t(-0.3)).item() == p.expected_value(t(0.3)).item()


def test_toy_centre_distribution(get_problem) -> None:
    centre = get_problem("toy-general").centre_distribution()
    assert centre is not None and centre.radius == 0.1
    assert centre.nodes.shape == (64, 1) and centre.weights.shape == (64,)
    assert centre.nodes.dtype == F64 and centre.weights.dtype == F64
    assert bool((centre.weights >= 0).all())
    assert centre.weights.sum().item() == pytest.approx(1.0, abs=1e-14)
    c = centre.nodes[:, 0]
    assert (centre.weights * c).sum().item() == pytest.approx(0.5, abs=1e-14)
    assert (centre.weights * (c - 0.5) ** 2).sum().item() == pytest.approx(0.01, abs=1e-14)
    # E|c - 0.5| under N(0.5, 0.1^2) = 0.1 sqrt(2/pi) (method §4.9: 0.0797885); |.| is not smooth,
    # so a 64-point Gauss-Hermite rule gets it to a few 1e-4 only.
    assert (centre.weights * (c - 0.5).abs()).sum().item() == pytest.approx(0.0797885, abs=1e-3)


@pytest.mark.parametrize(
    "name",
    ["ackley", "hartmann", "modified-branin", "newsvendor", "portfolio-uniform", "three-hump-camel",
     "six-hump-camel", "toy-general"],
)
def test_evaluate_broadcasts(get_problem, name: str) -> None:
    p = get_problem(name)
    g = torch.Generator().manual_seed(5)
    lo, hi = p.decision_bounds
    x = lo + (hi - lo) * torch.rand(4, 1, p.dim_x, generator=g, dtype=F64)
    c = torch.rand(1, 3, p.dim_c, generator=g, dtype=F64)
    out = p.evaluate(x, c)
    assert out.shape == (4, 3) and out.dtype == F64
    for i in range(4):
        for j in range(3):
            one = p.evaluate(x[i, 0], c[0, j]).item()
            assert out[i, j].item() == pytest.approx(one, rel=1e-12, abs=1e-12)
    # Float32 inputs are promoted; a lone point gives a batch of one truth value.
    assert p.evaluate(x.float(), c.float()).dtype == F64
    assert p.expected_value(x[0, 0]).shape == (1,)


def test_ackley_batch_is_chunked_and_consistent(get_problem) -> None:
    p = get_problem("ackley")
    x = torch.rand(24, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    batch = p.expected_value(x)  # 24 x 655,360 pairs: several chunks
    singles = torch.cat([p.expected_value(x[i : i + 1]) for i in range(0, 24, 7)])
    torch.testing.assert_close(batch[::7], singles, rtol=0, atol=1e-12)


def test_chunked_mean_matches_one_shot() -> None:
    nodes = torch.rand(1000, 2, generator=torch.Generator().manual_seed(2), dtype=F64)
    x = torch.rand(7, 3, generator=torch.Generator().manual_seed(4), dtype=F64)

    def fn(xb: torch.Tensor, cb: torch.Tensor) -> torch.Tensor:
        return (xb.sum(-1) * torch.cos(cb.sum(-1))).expand(xb.shape[0], cb.shape[1])

    want = fn(x.unsqueeze(1), nodes.unsqueeze(0)).mean(-1)
    for max_pairs in (1, 5, 64, 10**6):
        torch.testing.assert_close(chunked_mean(fn, x, nodes, max_pairs), want, rtol=0, atol=1e-14)


def test_truth_is_differentiable(get_problem) -> None:
    for name in ("ackley", "hartmann", "portfolio-normal", "six-hump-camel"):
        p = get_problem(name)
        x = torch.full((1, p.dim_x), 0.3, dtype=F64, requires_grad=True)
        (grad,) = torch.autograd.grad(p.expected_value(x).sum(), x)
        assert bool(torch.isfinite(grad).all())

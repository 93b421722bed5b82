"""Pieces shared by the problems: context laws, the QMC rule, chunked averaging.

The QMC "truth" of method §4 averages f over the first N points of the unscrambled
Sobol sequence, pushed through the inverse CDF of the context law. Those nodes depend only on
the problem, so each instance builds them once (lazily) and keeps one copy per device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

import torch
from torch import Tensor

from wdrbo_dist.problems.base import DTYPE, Fidelity, Problem, sobol_points

SQRT2 = math.sqrt(2.0)

# Pairs (x, node) per chunk of a QMC average: 2^16 float64 = 512 kB per temporary, small enough
# to stay in cache (measured: 2-3x faster per x than 16 MB chunks on big batches, no slower for
# one x) and to bound the memory of any batch (Ackley: 655,360 nodes per x).
MAX_PAIRS = 2**16

T = TypeVar("T")


def as_batch(x: Tensor, dim: int) -> Tensor:
    """`x` as a float64 [b, dim] batch on its own device (a lone point becomes b = 1)."""
    x = torch.as_tensor(x)
    return x.to(dtype=DTYPE).reshape(-1, dim)


def concat_inputs(x: Tensor, c: Tensor) -> Tensor:
    """u = [x, c] as float64 [..., d_x + d_c], broadcasting the batch dimensions of x and c."""
    batch = torch.broadcast_shapes(x.shape[:-1], c.shape[:-1])
    x = x.to(DTYPE).expand(*batch, x.shape[-1])
    c = c.to(device=x.device, dtype=DTYPE).expand(*batch, c.shape[-1])
    return torch.cat([x, c], -1)


def clamped_normal_sample(n: int, dim: int, mean: float, std: float, generator: torch.Generator) -> Tensor:
    """`n` draws of clamp(N(mean, std^2), 0, 1) per dimension: censoring, not truncation."""
    z = torch.randn(n, dim, generator=generator, dtype=DTYPE)
    return (mean + std * z).clamp_(0.0, 1.0)


def normal_qmc_nodes(n: int, dim: int, mean: float, std: float, clamp: bool = True) -> Tensor:
    """The QMC nodes of a (clamped) normal: Sobol points through the inverse CDF.

    The first Sobol point is 0, which maps to -inf and then clamps to 0 (harmless).
    """
    v = sobol_points(n, dim)
    c = mean + std * SQRT2 * torch.erfinv(2.0 * v - 1.0)
    return c.clamp_(0.0, 1.0) if clamp else c


def chunked_mean(
    fn: Callable[[Tensor, Tensor], Tensor], x: Tensor, nodes: Tensor, max_pairs: int = MAX_PAIRS
) -> Tensor:
    """(1/N) sum_k fn(x, nodes_k) for x [b, d] -> [b], in chunks of at most `max_pairs` pairs.

    `fn` receives x [b', 1, d] and a chunk of nodes [1, m, d_c] and returns [b', m].
    Chunking bounds the memory of big batches (Ackley has 655,360 nodes).
    """
    b, n = x.shape[0], nodes.shape[0]
    if b == 0:
        return torch.zeros(0, dtype=DTYPE, device=x.device)
    if b > max_pairs:  # more x's than a chunk holds: split the batch first
        return torch.cat([chunked_mean(fn, xs, nodes, max_pairs) for xs in x.split(max_pairs)])
    step = max(1, max_pairs // b)
    total = torch.zeros(b, dtype=DTYPE, device=x.device)
    xb = x.unsqueeze(1)
    for start in range(0, n, step):
        total = total + fn(xb, nodes[start : start + step].unsqueeze(0)).sum(-1)
    return total / n


class DeviceCache(Generic[T]):
    """A value built once on the CPU and copied once to each device that asks for it."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._by_device: dict[torch.device, T] = {}

    def get(self, device: torch.device | str = "cpu") -> T:
        device = torch.device(device)
        if device not in self._by_device:
            cpu = self._by_device.get(torch.device("cpu"))
            if cpu is None:
                cpu = self._build()
                self._by_device[torch.device("cpu")] = cpu
            if device.type != "cpu":
                self._by_device[device] = _to_device(cpu, device)
        return self._by_device[device]


def _to_device(value: T, device: torch.device) -> T:
    if isinstance(value, tuple):
        return tuple(_to_device(v, device) for v in value)  # type: ignore[return-value]
    return value.to(device)  # type: ignore[attr-defined]  # a Tensor, or anything with .to(device)


class QMCProblem(Problem):
    """A problem whose truth is the QMC average over `qmc_size` fixed context nodes.

    Subclasses say how to build the nodes; `expected_value` then averages `evaluate` over
    them in chunks. Problems with a cheaper exact rearrangement of the same sum override it.
    """

    qmc_size: ClassVar[int] = 65_536

    def __init__(self, fidelity: Fidelity = "paper") -> None:
        super().__init__(fidelity)
        self._nodes: DeviceCache[Tensor] = DeviceCache(self._build_qmc_nodes)

    def _build_qmc_nodes(self) -> Tensor:
        """The [qmc_size, d_c] CPU context nodes of the truth."""
        raise NotImplementedError

    def qmc_nodes(self, device: torch.device | str = "cpu") -> Tensor:
        """The cached QMC context nodes of the truth, on `device`."""
        return self._nodes.get(device)

    def truth_function(self, x: Tensor, c: Tensor) -> Tensor:
        """The integrand of the truth; `evaluate` unless a fidelity profile says otherwise."""
        return self.evaluate(x, c)

    def expected_value(self, x: Tensor) -> Tensor:
        x = as_batch(x, self.dim_x)
        return chunked_mean(self.truth_function, x, self.qmc_nodes(x.device))


class ClampedNormalProblem(QMCProblem):
    """Context clamp(N(context_mean, context_std^2), 0, 1), independently per dimension."""

    context_mean: ClassVar[float] = 0.5
    context_std: ClassVar[float] = 0.2

    def sample_context(self, n: int, generator: torch.Generator) -> Tensor:
        return clamped_normal_sample(n, self.dim_c, self.context_mean, self.context_std, generator)

    def _build_qmc_nodes(self) -> Tensor:
        return normal_qmc_nodes(self.qmc_size, self.dim_c, self.context_mean, self.context_std)

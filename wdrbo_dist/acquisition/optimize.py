"""Acquisition maximisation as in method §1.6 (BoTorch's `optimize_acqf` with q = 1, torch optimiser).

Screen `raw_samples` Sobol points, pick `num_restarts` starts by the Boltzmann heuristic, run
Adam on them jointly until BoTorch's stopping rule fires, return the best (the steps: above
`maximize_acquisition`). Every random draw comes from the run's CPU generator. Adam's update
and the stopping rule are written out (`AdamUpdate`, `MovingAverageStop`) with torch's and
BoTorch's arithmetic, so the iterates are the same to the bit (tests/acquisition/test_optimize.py),
without the library classes' per-step overhead (benchmarks/speed/profile_run.py, column `adam rest`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from wdrbo_dist.acquisition.sobol import scrambled_sobol

AcquisitionFn = Callable[[Tensor], Tensor]  # [b, d_x] -> [b]


@dataclass(frozen=True)
class OptimizerSettings:
    num_restarts: int
    raw_samples: int
    batch_limit: int
    lr: float = 0.025
    maxiter: int = 10_000
    rel_tol: float = 1e-5
    n_window: int = 10
    eta: float = 1.0
    project_parameter: bool = True


STANDARD = OptimizerSettings(num_restarts=10, raw_samples=1024, batch_limit=512)
CHEAP = OptimizerSettings(num_restarts=5, raw_samples=64, batch_limit=64)


@dataclass
class OptimizationStats:
    acquisition_calls: int = 0
    adam_steps: int = 0


def boltzmann_starts(x: Tensor, values: Tensor, n: int, eta: float, generator: torch.Generator) -> Tensor:
    """BoTorch's `initialize_q_batch` heuristic: sample starts with weights exp(eta * z-score)."""
    n = min(n, x.shape[0])
    finite = torch.isfinite(values)
    vals = torch.where(finite, values, torch.full_like(values, -torch.inf))
    std = vals[finite].std() if finite.sum() > 1 else torch.tensor(0.0)
    if not finite.any() or not torch.isfinite(std) or std <= 0:
        idx = torch.randperm(x.shape[0], generator=generator)[:n]
        return x[idx.to(x.device)]
    z = (vals - vals[finite].mean()) / std
    e = eta
    weights = torch.exp(e * z)
    while not torch.isfinite(weights[finite]).all():
        e /= 2
        weights = torch.exp(e * z)
    weights = torch.where(finite, weights, torch.zeros_like(weights)).cpu()
    if (weights > 0).sum() < n:
        weights = weights + finite.cpu().to(weights.dtype) * 1e-12 + 1e-300
    idx = torch.multinomial(weights, n, replacement=False, generator=generator)
    best = int(torch.argmax(torch.where(finite, vals, torch.full_like(vals, -torch.inf))).cpu())
    if best not in idx.tolist():
        idx[-1] = best
    return x[idx.to(x.device)]


class AdamUpdate:
    """torch.optim.Adam (defaults: betas (0.9, 0.999), eps 1e-8, no weight decay) on one tensor,
    as torch's single-tensor CPU path computes it, without the optimiser's per-step overhead."""

    def __init__(self, parameter: Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.parameter, self.lr, self.eps = parameter, lr, eps
        self.beta1, self.beta2 = betas
        self.first_moment = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        self.second_moment = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        self.steps = 0

    @torch.no_grad()
    def step(self, grad: Tensor) -> None:
        self.steps += 1
        step = float(self.steps)
        self.first_moment.lerp_(grad, 1 - self.beta1)
        self.second_moment.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        bias_correction1 = 1 - self.beta1**step
        bias_correction2_sqrt = (1 - self.beta2**step) ** 0.5
        denom = (self.second_moment.sqrt() / bias_correction2_sqrt).add_(self.eps)
        self.parameter.addcdiv_(self.first_moment, denom, value=-(self.lr / bias_correction1))


def _lanewise_sum(terms: list[float], lanes: int) -> float:
    """torch's sum of a short contiguous float64 vector (`lanes` <= len < 4 `lanes`) on a CPU
    whose vectors hold `lanes` doubles: the whole vectors summed lane by lane, the tail added
    to zero, then each lane's sum in turn (ATen's `vectorized_inner_sum`; its `row_sum`
    adds three more zero partials to each lane, which are kept for the sign of zero)."""
    whole = len(terms) // lanes * lanes
    partials = [0.0] * lanes
    for start in range(0, whole, lanes):
        for lane in range(lanes):
            partials[lane] += terms[start + lane]
    for lane in range(lanes):
        partials[lane] = ((partials[lane] + 0.0) + 0.0) + 0.0
    total = 0.0
    for term in terms[whole:]:
        total += term
    for partial in partials:
        total += partial
    return total


def _window_weights(n_window: int, eta: float) -> tuple[Tensor, tuple[float, ...]]:
    """BoTorch's window weights (float32, normalised, then float64), on the CPU whatever the
    run's device, and the same as Python floats."""
    weights = torch.exp(torch.linspace(-eta, 0, n_window))
    weights = (weights / weights.sum()).to(torch.float64)
    return weights, tuple(weights.tolist())


@functools.lru_cache(maxsize=8)
def _window_lanes(weights: tuple[float, ...]) -> int | None:
    """The lane count (4: AVX2, 8: AVX-512) whose `_lanewise_sum` of weighted windows equals
    torch's reduction here, checked on windows of mixed signs and magnitudes; None where
    neither does (another torch build or CPU): the stopping rule then keeps torch's sum."""
    generator = torch.Generator().manual_seed(0)
    size = len(weights)
    windows = torch.randn(256, size, dtype=torch.float64, generator=generator)
    windows *= 10.0 ** torch.randint(-6, 7, (256, 1), generator=generator).to(torch.float64)
    windows[:8] = windows[:8].round()  # ties and exact zeros
    tensor_weights = torch.tensor(weights, dtype=torch.float64)
    for lanes in (4, 8):
        if not lanes <= size < 4 * lanes:
            continue
        if all(_lanewise_sum([a * b for a, b in zip(row, weights)], lanes) == float((window * tensor_weights).sum(dim=0))
               for row, window in zip(windows.tolist(), windows)):
            return lanes
    return None


class MovingAverageStop:
    """BoTorch's `ExpMAStoppingCriterion` for a scalar loss being minimised: stop when the
    relative decrease of the exponentially weighted mean of the last `n_window` losses falls
    below `rel_tol`, or at `maxiter`. The weights are BoTorch's (float32, then float64) and
    each window's mean is the same torch reduction, in Python floats where `_window_lanes`
    finds its order (a torch call per step is ~10x dearer); the previous window's mean is reused."""

    def __init__(self, maxiter: int, n_window: int, rel_tol: float, eta: float = 1.0) -> None:
        self.weights, self.weight_list = _window_weights(n_window, eta)
        self.lanes = _window_lanes(self.weight_list)
        self.maxiter, self.n_window, self.rel_tol = maxiter, n_window, rel_tol
        self.calls = 0
        self.losses: list[float] = []
        self.previous_mean: float | None = None

    def _window_mean(self, losses: list[float]) -> float:
        if self.lanes is None:
            return float((torch.tensor(losses, dtype=torch.float64) * self.weights).sum(dim=0))
        return _lanewise_sum([loss * weight for loss, weight in zip(losses, self.weight_list)], self.lanes)

    def __call__(self, loss: float) -> bool:
        self.calls += 1
        if self.calls == self.maxiter:
            return True
        self.losses.append(loss)
        if len(self.losses) > self.n_window + 1:
            del self.losses[0]
        if len(self.losses) < self.n_window + 1:
            return False
        if self.previous_mean is None:
            self.previous_mean = self._window_mean(self.losses[:-1])
        previous, mean = self.previous_mean, self._window_mean(self.losses[1:])
        self.previous_mean = mean
        decrease = previous - mean
        if previous == 0.0:  # as torch divides: +-inf, or nan (never below the tolerance)
            relative = math.nan if decrease == 0.0 or math.isnan(decrease) else math.copysign(math.inf, decrease)
        else:
            relative = decrease / abs(previous)
        return relative < self.rel_tol


def adam_ascent(
    acquisition: AcquisitionFn, starts: Tensor, bounds: Tensor, settings: OptimizerSettings
) -> tuple[Tensor, Tensor, int]:
    """Step 3: Adam from `starts` [r, d] on all of them jointly; returns the clamped end points,
    their values (no gradient) and the number of Adam steps."""
    lower, upper = bounds[0], bounds[1]
    x = starts.clone().requires_grad_(True)
    optimizer = AdamUpdate(x, lr=settings.lr)
    stopping = MovingAverageStop(settings.maxiter, settings.n_window, settings.rel_tol)
    direct = getattr(acquisition, "value_and_gradient", None)  # `Acquisition.value_and_gradient`
    steps = 0
    while True:
        if settings.project_parameter:
            with torch.no_grad():
                x.clamp_(lower, upper)  # = max(min(x, upper), lower) to the bit (signed zeros too) for lower <= upper
            point = x
        else:
            point = torch.maximum(torch.minimum(x.detach(), upper), lower).requires_grad_(True)
        given = direct(point.detach()) if direct is not None else None
        if given is None:
            loss = -acquisition(point).sum()
            (grad,) = torch.autograd.grad(loss, point)
        else:
            # autograd's result to the bit: the negated sum hands each value -1, and -1 times a
            # gradient row is its negation
            values, gradient = given
            loss, grad = -values.sum(), -gradient
        # A non-finite gradient (e.g. at a kink) must not poison the whole batch of restarts.
        optimizer.step(torch.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0))
        steps += 1
        if stopping(loss.item()):
            break
    with torch.no_grad():
        x = torch.maximum(torch.minimum(x.detach(), upper), lower)
        return x, acquisition(x), steps


# 1. screen `raw_samples` scrambled Sobol points (in chunks of `batch_limit`, no gradients);
# 2. pick `num_restarts` starts by the Boltzmann heuristic (the best raw point always included);
# 3. run Adam (lr 0.025) on all starts jointly until BoTorch's exponential-moving-average
#    stopping rule fires (window 10, rel_tol 1e-5) or 10,000 steps. `project_parameter`: the
#    Adam parameter is clamped into the box in place at every step; otherwise, as BoTorch's
#    `gen_candidates_torch` does, the acquisition sees a clamped copy and the parameter itself
#    may leave the box (its gradient is the copy's);
# 4. return the start with the largest final value.
def maximize_acquisition(
    acquisition: AcquisitionFn,
    bounds: Tensor,
    settings: OptimizerSettings,
    generator: torch.Generator,
) -> tuple[Tensor, float, OptimizationStats]:
    """Maximise `acquisition` over the box `bounds` [2, d]; returns (x [d], value, stats)."""
    stats = OptimizationStats()
    lower, upper = bounds[0], bounds[1]
    dim = bounds.shape[-1]
    raw = lower + (upper - lower) * scrambled_sobol(settings.raw_samples, dim, generator).to(bounds)
    with torch.no_grad():
        values = torch.cat([acquisition(chunk) for chunk in raw.split(settings.batch_limit)])
    stats.acquisition_calls += -(-settings.raw_samples // settings.batch_limit)
    starts = boltzmann_starts(raw, values, settings.num_restarts, settings.eta, generator)

    x, final, steps = adam_ascent(acquisition, starts, bounds, settings)
    stats.adam_steps += steps
    stats.acquisition_calls += steps + 1
    final = torch.where(torch.isfinite(final), final, torch.full_like(final, -torch.inf))
    best = int(torch.argmax(final))
    return x[best].detach(), float(final[best]), stats

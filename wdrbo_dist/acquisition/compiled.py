"""The compiled Adam step (models/compiled_ucb.py, models/compiled_pairs.py) of the acquisitions
that are a weighted mean UCB over fixed contexts, minus eps L(x) in WDRBO (ERBO, WDRBO, SBO-KDE),
and of those that are another function of the UCB at fixed or fresh contexts (DRBO-KDE's KDE
samples, DRBO-MMD's and the minimax's grids, StableOpt's box). The run's NumericalSettings
(`adam_pass`) say whether an Adam step takes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeVar

from torch import Tensor

from wdrbo_dist.models.context_features import ContextFeatures, Region
from wdrbo_dist.models.gp import GaussianProcess

if TYPE_CHECKING:
    from wdrbo_dist.models.compiled_pairs import CompiledFreshPairs, CompiledPairs
    from wdrbo_dist.models.compiled_ucb import CompiledPosteriorUCB, CompiledUCB

# Whether an Adam step takes these kernels is the run's route (NumericalSettings.adam_pass,
# `compiled` on the CPU): the acquisition and its closed-form x-gradient in one numba call, the
# same values to rounding as torch's autograd through the GP's routes, an Adam step 2-15x cheaper
# (benchmarks/speed/routes.py adam-step).
# The compiled pass serves calls of at most this many candidates (Adam's restarts); the
# screening pass's hundreds keep torch's, whose products run at BLAS speed.
COMPILED_MAX_BATCH = 16
Kernel = TypeVar("Kernel")


def compiled_route(compiled: Kernel | None, x: Tensor) -> Kernel | None:
    """A compiled kernel where it serves this call (built, and an Adam-sized batch), else None."""
    return compiled if compiled is not None and x.shape[0] <= COMPILED_MAX_BATCH else None


def compiled_value_and_gradient(compiled: "CompiledUCB | CompiledPosteriorUCB | None",
                                x: Tensor) -> tuple[Tensor, Tensor] | None:
    """`Acquisition.value_and_gradient` for the acquisitions with a mean-UCB or posterior-UCB kernel."""
    kernel = compiled_route(compiled, x)
    return None if kernel is None else kernel.value_and_gradient(x)


def compiled_mean_ucb(model: GaussianProcess, nodes: Tensor, weights: Tensor, beta: float,
                      points: Tensor | None = None, radius: float = 0.0,
                      detach_lipschitz: bool = False, features: ContextFeatures | None = None) -> "CompiledUCB | None":
    """The kernel's acquisition for these contexts (None off the CPU or float64); numba is
    imported here, where it is first used. `features`: the GP's context features of the same
    nodes and points (their vectors and SVD are reused)."""
    from wdrbo_dist.models.compiled_ucb import CompiledUCB

    return CompiledUCB.build(model, nodes, weights, points, beta, radius=radius, detach_lipschitz=detach_lipschitz,
                             features=features)


def compiled_posterior_ucb(model: GaussianProcess, beta: float) -> "CompiledPosteriorUCB | None":
    """GP-UCB's kernel: mu(x) + beta sigma(x) on a GP over x alone (None off the CPU or float64)."""
    from wdrbo_dist.models.compiled_ucb import CompiledPosteriorUCB

    return CompiledPosteriorUCB.build(model, beta)


def compiled_pairs(model: GaussianProcess, contexts: Tensor, beta: float,
                   features: ContextFeatures | None = None, sparse_backward: bool = False) -> "CompiledPairs | None":
    """The kernel's UCB [b, N] at every (candidate, context) pair for these fixed contexts, for an
    acquisition that is some function of them (None off the CPU or float64); `features`: the
    GP's context features of the same contexts, whose vectors and basis it reuses;
    `sparse_backward`: the backward pass over the contexts of nonzero weight only."""
    from wdrbo_dist.models.compiled_pairs import CompiledPairs

    return CompiledPairs.build(model, contexts, beta, features, sparse_backward)


class FixedContextUCB:
    """x [b, d_x] -> u [b, N], the UCB at every (candidate, context) pair for contexts fixed over
    the BO step, differentiable in x: torch's pass on the GP's context features for the
    screening pass's many candidates, the compiled pair kernel (with `compiled`, on the CPU)
    for an Adam step's few. DRBO-KDE's KDE samples and DRBO-MMD's and the minimax's grids take it."""

    def __init__(self, model: GaussianProcess, contexts: Tensor, beta: float, compiled: bool = False,
                 sparse_backward: bool = False) -> None:
        self.model = model
        self.beta = beta
        self.features = model.context_features(contexts)
        self._compiled = compiled_pairs(model, contexts, beta, self.features, sparse_backward) if compiled else None

    def __call__(self, x: Tensor) -> Tensor:
        if (kernel := compiled_route(self._compiled, x)) is not None:
            return kernel(x)
        return self.model.ucb_from_features(x, self.features, self.beta)[0]

    def value_and_gradient(self, x: Tensor, function: Callable[[Tensor], tuple[Tensor, Tensor] | None],
                           ) -> tuple[Tensor, Tensor] | None:
        """(f(u) [b], its x-gradient [b, d_x]) without autograd, for u [b, N] the UCB at every pair
        and `function` u -> (f(u), df/du [b, N]) (None: it leaves this call to autograd): the
        compiled kernel's forward pass, then its backward pass with df/du as the weights. None
        where the kernel does not serve the call. `Acquisition.value_and_gradient` of DRBO-KDE,
        DRBO-MMD and the minimax, whose df/du is autograd's, written out."""
        kernel = compiled_route(self._compiled, x)
        if kernel is None:
            return None
        u, kept = kernel.values(x)
        found = function(u)
        if found is None:
            return None
        value, weights = found
        return value, kernel.gradient(kept, weights)


def compiled_fresh_pairs(model: GaussianProcess, beta: float, region: Region | None) -> "CompiledFreshPairs | None":
    """The kernel's UCB [b, N] for contexts drawn afresh at every call, their exponentials by a
    vectorised polynomial within 1 ulp of libm's (None off the CPU or float64)."""
    from wdrbo_dist.models.compiled_pairs import CompiledFreshPairs

    return CompiledFreshPairs.build(model, beta, region)

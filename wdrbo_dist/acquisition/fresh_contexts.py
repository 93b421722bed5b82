"""The UCB at every (candidate, context) pair for a context set drawn for one call only.

StableOpt's Sobol box and DRBO-KDE's m(x) samples change at every acquisition call, so the
GP's reusable context features do not pay for themselves there (see `FreshContextUCB`), unless
the box is known when the acquisition is built: on the GP's basis route
(NumericalSettings.context_basis) the contexts are then projected onto one basis of the box's context vectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from wdrbo_dist.acquisition.compiled import compiled_fresh_pairs, compiled_route
from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.models.kernel import VARIANCE_FLOOR, rbf

if TYPE_CHECKING:
    from wdrbo_dist.models.compiled_pairs import CompiledFreshPairs

# Below this many candidates, `FreshContextUCB` forms the candidate-side quadratic forms
# directly; above it the GP's shared context features pay for their construction.
DIRECT_MAX_BATCH = 128
_DIRECT_CHUNK = 32  # candidates per [chunk, N, n] block


class FreshContextUCB:
    """UCB on every pair (candidate, context) for a context set used only once.

    StableOpt and DRBO-KDE's m(x) draw new contexts at every call, so the GP's reusable
    context features ([N, n(n+1)/2], built by gathers) cost more than they save for the few
    candidates of an Adam step (measured 160 ms vs 11 ms for 5 x 1024 pairs at n = 100).
    For small batches the variance k^T K^{-1} k with k = kx_b * kc_j is computed as
    kc_j^T A_b kc_j, A_b = diag(kx_b) K^{-1} diag(kx_b) (`GaussianProcess.quadratic_forms`):
    one product, no gathers.

    With `box` [2, d_c], the region every call's contexts come from, and the GP on its basis
    route, each call projects its contexts onto `GaussianProcess.region_basis(box)` (built
    once): an [r, r] form per candidate (r ~ 15-35 for one context dimension) instead of an
    [n, n] one (`GaussianProcess.ucb_in_region`); batches above DIRECT_MAX_BATCH take the
    GP's features with the same basis (`ucb_pairs(..., region=)`).

    With `compiled` (NumericalSettings.adam_pass `compiled`), a call of a few candidates that takes no
    gradient (an Adam step's search for the minimum) goes through the compiled pair kernel,
    its contexts' exponentials by a vectorised polynomial within 1 ulp of libm's.
    """

    def __init__(self, model: GaussianProcess, beta: float, box: Tensor | None = None, compiled: bool = False) -> None:
        self.model = model
        self.beta = beta
        self.region = model.region_basis(box) if box is not None else None
        self.alpha = model.weights
        self._compiled = compiled_fresh_pairs(model, beta, self.region) if compiled else None

    def minimum(self, x: Tensor, contexts: Tensor) -> Tensor | None:
        """min_j UCB(x_b, c_j) [b], differentiable in x, by the compiled pair kernel (None where it
        does not serve: not `compiled`, or more than COMPILED_MAX_BATCH candidates)."""
        kernel = compiled_route(self._compiled, x)
        return None if kernel is None else kernel.minimum(x, contexts)

    def kernel(self, x: Tensor) -> "CompiledFreshPairs | None":
        """The compiled pair kernel where it serves this call (its `minimum_values` and
        `minimum_gradient` outside autograd), else None."""
        return compiled_route(self._compiled, x)

    def __call__(self, x: Tensor, contexts: Tensor) -> Tensor:
        """UCB [b, N] at all pairs (x_i, c_j)."""
        kernel = compiled_route(self._compiled, x)
        if kernel is not None and not (x.requires_grad and torch.is_grad_enabled()):
            return kernel(x, contexts)
        if x.shape[0] > DIRECT_MAX_BATCH:
            return self.model.ucb_pairs(x, contexts, self.beta, region=self.region)[0]
        if self.region is not None:
            ucb = self.model.ucb_in_region(x, contexts, self.region, self.beta)
            if ucb is not None:
                return ucb
        model, dim_x = self.model, x.shape[-1]
        kx = rbf(x, model.train_x[:, :dim_x], model.lengthscale[:dim_x])  # [b, n]
        kc = rbf(contexts, model.train_x[:, dim_x:], model.lengthscale[dim_x:])  # [N, n]
        mean = model.mean_constant + (kx * self.alpha) @ kc.T
        quads = [model.quadratic_forms(block, kc) for block in kx.split(_DIRECT_CHUNK)]  # [c, N] each
        var = (1.0 - torch.cat(quads)).clamp_min(VARIANCE_FLOOR)
        return mean + self.beta * var.sqrt()

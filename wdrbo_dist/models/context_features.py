"""The context side of the GP's UCB at every (candidate, context) pair: the context vectors'
pair products (`ContextFeatures`), on the training points or on a numerical basis of the vectors,
and the basis of a box's contexts drawn afresh at every call (`Region`).

`ContextSide` is a part of `gp.GaussianProcess`; `pair_routes.PairRoutes` holds the candidate side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from wdrbo_dist.models.kernel import numerical_basis, rbf

# `region_basis`: grid spacing in context lengthscales (at 1/8 the projections of fresh contexts
# are exact to ~1e-13 where the box spans several lengthscales; a box under one lengthscale wide
# gets too few points, and its contexts often fail the check), the largest
# grid, and the projection residual above which a context set is not in the basis's span
# (`ucb_in_region` and the compiled kernels then take V = I): REGION_RESIDUAL_FACTOR times the
# grid's own largest residual on the cut basis, or REGION_RESIDUAL_MAX if larger (contexts
# inside the box lie within 1-2.5x it, beyond it 100x or more, but where a long lengthscale
# spans both: benchmarks/speed/routes.py region).
REGION_SPACING = 0.125
REGION_GRID_MAX = 4096
REGION_RESIDUAL_MAX = 1e-11
REGION_RESIDUAL_FACTOR = 4.0


@dataclass(frozen=True)
class ContextFeatures:
    """The context-side factors of `GaussianProcess.ucb_pairs` (see there): the pair products of
    the context vectors, in the training points' coordinates or (`basis` given) in a basis."""

    quad: Tensor  # [p(p+1)/2, columns]: p = n, or r on the basis route
    mean: Tensor  # [n, columns]
    n_contexts: int
    n_gradient: int
    dim_c: int
    basis: Tensor | None = None  # basis route: [n, r] orthonormal, spanning every context vector
    # The vectors' own numerical basis (their SVD), whether or not the route above took it: the
    # compiled kernels of the same contexts reuse it rather than take the same SVD again.
    span: Tensor | None = None


@dataclass(frozen=True)
class Region:
    """A basis for contexts drawn afresh in a known box (`GaussianProcess.region_basis`)."""

    basis: Tensor  # [n, r] orthonormal, spanning the context vectors of the box
    residual_max: float  # a context set whose projection leaves more is not in its span


class ContextSide:
    """The context side of `GaussianProcess` (its training data, kernel and route options)."""

    train_x: Tensor
    lengthscale: Tensor
    n: int
    context_basis: bool  # the route of `context_features` (see `PairRoutes.ucb_pairs`)

    def context_features(
        self, contexts: Tensor, gradient_contexts: Tensor | None = None, region: Region | None = None
    ) -> "ContextFeatures":
        """The context side (Q and the mean weights) of `ucb_pairs`, reusable across candidates.

        `region` (a `region_basis` spanning every context vector, as for contexts drawn in a
        known box): the basis route projects onto it rather than taking the vectors' own SVD."""
        dim_c = contexts.shape[-1]
        ls_c = self.lengthscale[-dim_c:]
        train_c = self.train_x[:, -dim_c:]
        k_c = rbf(contexts, train_c, ls_c)  # [N, n]
        vectors = [k_c]
        m = 0
        if gradient_contexts is not None:
            m = gradient_contexts.shape[0]
            vectors.extend(self.context_gradient_vectors(gradient_contexts))  # kc_M, then dkc_M / dc_d
        mean = torch.cat(vectors, 0).T  # [n, N + M + M d_c]: every context-side vector
        basis = span = None
        if self.context_basis:
            found = numerical_basis(mean.T) if region is None else projected(mean.T, region)
            if found is not None:
                candidate_basis, coefficients = found
                span = candidate_basis if region is None else None
                n, r, columns = self.n, candidate_basis.shape[1], mean.shape[1]
                # multiply-adds per candidate: B_b and its pairs with the columns, against n's pairs
                if n * n * r + n * r * r + r * (r + 1) // 2 * columns < n * (n + 1) // 2 * columns:
                    basis = candidate_basis
                    vectors = list(coefficients.split([v.shape[0] for v in vectors]))
        sizes = [v.shape[0] for v in vectors]
        size = vectors[0].shape[1]
        quad = vectors[0].new_empty(sum(sizes), size * (size + 1) // 2)  # one row per vector
        blocks = quad.split(sizes)
        _triangle_products(vectors[0], vectors[0], blocks[0])
        if m:
            k_g = vectors[1]
            _triangle_products(k_g, k_g, blocks[1])
            for dk, block in zip(vectors[2:], blocks[2:]):  # d(kc_i kc_j) = dk_i kc_j + kc_i dk_j
                _triangle_products(dk, k_g, block)
                _triangle_products(k_g, dk, block, accumulate=True)
        return ContextFeatures(
            quad=quad.T, mean=mean, n_contexts=contexts.shape[0], n_gradient=m, dim_c=dim_c, basis=basis, span=span,
        )

    def context_gradient_vectors(self, contexts: Tensor) -> Tensor:
        """[1 + d_c, M, n]: the context vectors kc_M at `contexts` [M, d_c], then their derivatives
        d kc_Mi / d c_Md = -kc_Mi (c_Md - z_id) / l_d^2, one block per context dimension d."""
        dim_c = contexts.shape[-1]
        train_c, ls_c = self.train_x[:, -dim_c:], self.lengthscale[-dim_c:]
        k_g = rbf(contexts, train_c, ls_c)  # [M, n]
        diff = (contexts[:, None, :] - train_c[None, :, :]) / ls_c**2  # [M, n, d_c]
        return torch.stack([k_g, *(-k_g * diff[..., d] for d in range(dim_c))])

    def region_basis(self, box: Tensor) -> Region | None:
        """A `Region`: an orthonormal basis [n, r] of the context vectors kc(c) of every c in `box` [2, d_c]
        (either bound may be the larger), for contexts drawn afresh at every call; None where
        the basis route is off or the box needs a grid above REGION_GRID_MAX points.

        It is the numerical basis of kc on a grid of spacing REGION_SPACING lengthscales, cut
        as a context set's is (`numerical_basis`): a smooth kernel's vectors between grid points
        lie as near the span as the grid's own (not in boxes under a lengthscale wide), and
        `projected` checks that every context set it is given does, to the region's
        `residual_max`."""
        if not self.context_basis:
            return None
        dim_c = box.shape[-1]
        ls_c = self.lengthscale[-dim_c:]
        low, high = box.to(self.train_x).amin(0), box.to(self.train_x).amax(0)
        counts = [max(2, math.ceil(float(w) / (REGION_SPACING * float(l))) + 1) for w, l in zip(high - low, ls_c)]
        if math.prod(counts) > REGION_GRID_MAX:
            return None
        axes = [torch.linspace(float(lo), float(hi), count, dtype=self.train_x.dtype, device=self.train_x.device)
                for lo, hi, count in zip(low, high, counts)]
        grid = torch.cartesian_prod(*axes).reshape(-1, dim_c)
        vectors = rbf(grid, self.train_x[:, -dim_c:], ls_c)
        basis, coefficients = numerical_basis(vectors)
        residual = float((vectors - coefficients @ basis.T).abs().max())
        return Region(basis, max(REGION_RESIDUAL_MAX, REGION_RESIDUAL_FACTOR * residual))


def projected(vectors: Tensor, region: Region) -> tuple[Tensor, Tensor] | None:
    """(basis, coefficients [rows, r]) of `vectors` [rows, n] in the region's orthonormal basis
    [n, r]; None where some vector is further than the region's `residual_max` from its span."""
    basis = region.basis
    coefficients = vectors @ basis
    if float((vectors - coefficients @ basis.T).abs().max()) > region.residual_max:
        return None
    return basis, coefficients


def _triangle_products(left: Tensor, right: Tensor, out: Tensor, accumulate: bool = False) -> None:
    """out[:, k] = left[:, i] * right[:, j] (or += with `accumulate`) for the k-th pair i <= j of
    the columns in `torch.triu_indices` order: a row i of the triangle at a time, written in
    place. The same products as gathering the pairs' columns, without the [rows, p(p+1)/2]
    gathered copies (`benchmarks/speed/profile_run.py`, column "build")."""
    size, start = left.shape[1], 0
    for i in range(size):
        segment = out[:, start : start + size - i]
        if accumulate:
            segment.add_(left[:, i : i + 1] * right[:, i:])
        else:
            torch.mul(left[:, i : i + 1], right[:, i:], out=segment)
        start += size - i

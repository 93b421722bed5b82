"""The RBF kernel, the posterior variance's floor and the numerical basis of a set of vectors:
what the GP's posterior, its context-set routes and its compiled kernels share."""

from __future__ import annotations

import torch
from torch import Tensor

VARIANCE_FLOOR = 1e-12
# The rank cut of a numerical basis (`numerical_basis`): singular values above sigma_1 * this.
# Posterior variances on the cut basis stay within ~5e-8 of a direct solve, two orders inside the
# noise's sd (docs/numerics.md), on fewer vectors than numpy's rank keeps (15 or more fewer on
# two context dimensions at n = 99).
BASIS_TOLERANCE = 1e-9


def rbf(a: Tensor, b: Tensor, lengthscale: Tensor) -> Tensor:
    """k(a, b) = exp(-0.5 * sum_k (a_k - b_k)^2 / l_k^2) for a [..., m, D], b [n, D] -> [..., m, n]."""
    a_s = a / lengthscale
    b_s = b / lengthscale
    if torch.is_grad_enabled() and (a_s.requires_grad or b_s.requires_grad):
        sq = (a_s * a_s).sum(-1, keepdim=True) - 2.0 * a_s @ b_s.T + (b_s * b_s).sum(-1)
        return torch.exp(-0.5 * sq.clamp_min(0.0))
    # Without autograd, the same operations in place on the product (the same bits, written
    # once instead of five times: context_gram's [1024, 1024] arrays).
    sq = (2.0 * a_s) @ b_s.T
    return sq.neg_().add_((a_s * a_s).sum(-1, keepdim=True)).add_((b_s * b_s).sum(-1)).clamp_min_(0.0).mul_(-0.5).exp_()


def numerical_basis(vectors: Tensor, relative_tolerance: float = BASIS_TOLERANCE) -> tuple[Tensor, Tensor]:
    """(V [n, r], A [rows, r]) with orthonormal V and vectors ~= A V^T: the right singular
    vectors above sigma_1 * `relative_tolerance` (every vector is then within sigma_{r+1} of
    the span) and never below numpy's rank tolerance (sigma_1 * max(rows, n) * eps)."""
    left, singular, right_t = torch.linalg.svd(vectors, full_matrices=False)
    if singular.numel() == 0 or not bool(singular[0] > 0):
        return vectors.new_zeros(vectors.shape[-1], 0), vectors.new_zeros(vectors.shape[0], 0)
    numpy_cut = singular[0] * max(vectors.shape) * torch.finfo(vectors.dtype).eps
    rank = int((singular > torch.maximum(numpy_cut, singular[0] * relative_tolerance)).sum())
    return right_t[:rank].T, left[:, :rank] * singular[:rank]

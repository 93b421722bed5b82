"""The RBF kernel, the posterior variance's floor and the numerical basis of a set of vectors:
what the GP's posterior, its context-set routes and its compiled kernels share."""

from __future__ import annotations

import torch
from torch import Tensor

VARIANCE_FLOOR = 1e-12


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


def numerical_basis(vectors: Tensor, relative_tolerance: float = 0.0) -> tuple[Tensor, Tensor]:
    """(V [n, r], A [rows, r]) with orthonormal V and vectors ~= A V^T: the right singular
    vectors above numpy's rank tolerance (sigma_1 * max(rows, n) * eps) or, where larger,
    sigma_1 * `relative_tolerance` (NumericalSettings.basis_tolerance: every vector is then within
    sigma_{r+1} of the span)."""
    left, singular, right_t = torch.linalg.svd(vectors, full_matrices=False)
    if singular.numel() == 0 or not bool(singular[0] > 0):
        return vectors.new_zeros(vectors.shape[-1], 0), vectors.new_zeros(vectors.shape[0], 0)
    tolerance = singular[0] * max(vectors.shape) * torch.finfo(vectors.dtype).eps
    if relative_tolerance > 0.0:
        tolerance = torch.maximum(tolerance, singular[0] * relative_tolerance)
    rank = int((singular > tolerance).sum())
    return right_t[:rank].T, left[:, :rank] * singular[:rank]

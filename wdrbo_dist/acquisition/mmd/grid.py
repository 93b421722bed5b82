"""Context grid, reference pmf, Gram matrix and radius shared by DRBO-MMD and its minimax approximation.

method §3.6 / §3.7. The grid is linspace(lb, ub, N) for d_c = 1. For d_c >= 2 the reference stacks
per-dimension linspaces column-wise (ceil(N^{1/d_c}) points on the box diagonal, method §8.3); the
paper profile uses the full tensor grid of round(N^{1/d_c})^{d_c} points (100 -> 10x10,
1024 -> 32x32). The pmf w snaps every observed context to its nearest grid point (ties: first
index), vectorised. K is the current GP's kernel on the grid's context coordinates (the decision
part cancels for the RBF kernel), symmetrised.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from wdrbo_dist.models.kernel import rbf

# Kirschner et al.'s MMD concentration constant with delta = 0.1 and kernel bound 1.
MMD_RADIUS_CONSTANT = 2.0 + math.sqrt(2.0 * math.log(10.0))


def grid_axes(bounds: Tensor, size: int, diagonal: bool) -> list[Tensor]:
    """The per-dimension linspaces the grid is built from."""
    bounds = bounds.to(torch.float64)
    dim = bounds.shape[-1]
    if dim == 1:
        per_dim = size
    elif diagonal:
        per_dim = math.ceil(size ** (1.0 / dim))
    else:
        per_dim = max(1, round(size ** (1.0 / dim)))
    return [torch.linspace(float(bounds[0, k]), float(bounds[1, k]), per_dim, dtype=torch.float64) for k in range(dim)]


def context_grid(bounds: Tensor, size: int, diagonal: bool) -> Tensor:
    """The discretisation [M, d_c] of the context box `bounds` [2, d_c].

    Tensor grids are ordered like `torch.meshgrid(..., indexing="ij")` flattened, so that the
    Gram matrix of a product kernel on them is the Kronecker product of the per-axis ones.
    """
    axes = grid_axes(bounds, size, diagonal)
    if diagonal or len(axes) == 1:
        return torch.stack(axes, dim=-1)
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh], dim=-1)


def empirical_pmf(contexts: Tensor, grid: Tensor) -> Tensor:
    """w [M]: the share of observed contexts whose nearest grid point is each grid point."""
    contexts = contexts.to(grid)
    distance = torch.cdist(contexts, grid, compute_mode="donot_use_mm_for_euclid_dist")
    nearest = distance.argmin(dim=-1)  # first index on ties (exact distances, no matmul form)
    counts = torch.bincount(nearest, minlength=grid.shape[0]).to(grid.dtype)
    return counts / contexts.shape[0]


def context_gram(grid: Tensor, context_lengthscale: Tensor) -> Tensor:
    """K [M, M] = k_c(g_j, g_l) with the GP's context lengthscales, symmetrised (`rbf`'s
    arithmetic, which is not exactly symmetric; on the CPU in float64, the same bits in one
    compiled pass instead of torch's transposed sum)."""
    k = rbf(grid, grid, context_lengthscale.to(grid))
    if k.device.type != "cpu" or k.dtype != torch.float64 or k.requires_grad:
        return 0.5 * (k + k.T)
    from wdrbo_dist.acquisition.gram_kernel import symmetric_part

    return torch.from_numpy(symmetric_part(k.numpy()))


def mmd_radius(n: int, constant: float = MMD_RADIUS_CONSTANT) -> float:
    """r_n = (2 + sqrt(2 ln 10)) / sqrt(n), n = number of observations (method §3.6, §8.9)."""
    return constant / math.sqrt(n)

"""PSD-safe factors F with F F^T = K of DRBO-MMD's context Gram matrix (method §3.6, §8.14).

CVXPY 1.9 needs a factor where the reference passed psd_wrap(K). The default stops a pivoted
Cholesky factor at CVXPY 1.6's eigenvalue cutoff, so the ball is the reference's; tensor grids
(d_c >= 2, paper profile) have a Kronecker-structured Gram matrix, and so does this factor.
"""

from __future__ import annotations

import numpy as np

EIGEN_CUTOFF = 1e6 * np.finfo(np.float64).eps  # CVXPY's decomp_quad default (relative to max)
FACTORS = ("pivoted", "eigen", "cholesky")


def pivoted_cholesky(gram: np.ndarray, cutoff: float = EIGEN_CUTOFF) -> np.ndarray:
    """L [M, M] (zero columns padded), L L^T = gram up to a residual diagonal <= cutoff * max diag.

    Greedy diagonal pivoting; column k is exactly zero on the rows pivoted before it, so the
    factor has a staircase (permuted-triangular) pattern, which keeps the KKT systems of the
    conic solvers sparse where an eigen factor of a full-rank Gram matrix is dense.
    """
    size = gram.shape[0]
    residual = np.diag(gram).astype(np.float64).copy()
    factor = np.zeros((size, size))
    stop = cutoff * float(residual.max())
    chosen: list[int] = []
    for k in range(size):
        j = int(np.argmax(residual))
        if residual[j] <= stop:
            break
        root = float(np.sqrt(residual[j]))
        column = (gram[:, j] - factor[:, :k] @ factor[j, :k]) / root
        column[chosen] = 0.0
        column[j] = root
        factor[:, k] = column
        chosen.append(j)
        residual -= column**2
        residual[chosen] = 0.0
    return factor


def tensor_grid_factor(axes: list[np.ndarray], lengthscales: np.ndarray) -> np.ndarray:
    """Pivoted-Cholesky factor of the RBF Gram matrix on a tensor grid, as a Kronecker product.

    On the grid ordered as `context_grid` orders it, K = K_1 (x) K_2 (x) ..., so the Kronecker
    product of the per-axis factors is a factor of K (sparser than one computed from K).
    """
    factor = np.ones((1, 1))
    for axis, lengthscale in zip(axes, lengthscales):
        gram = np.exp(-0.5 * (axis[:, None] - axis[None, :]) ** 2 / float(lengthscale) ** 2)
        factor = np.kron(factor, pivoted_cholesky(gram))
    return factor


def gram_factor(gram: np.ndarray, kind: str = "pivoted") -> np.ndarray:
    """F [M, M] with F F^T a PSD approximation of the symmetric `gram` (zero columns padded)."""
    gram = 0.5 * (gram + gram.T)
    size = gram.shape[0]
    if kind == "pivoted":
        return pivoted_cholesky(gram)
    if kind == "eigen":
        lam, vec = np.linalg.eigh(gram)
        keep = lam > EIGEN_CUTOFF * max(float(lam.max()), 0.0)
        factor = np.zeros((size, size))
        factor[:, : int(keep.sum())] = vec[:, keep] * np.sqrt(lam[keep])
        return factor
    if kind == "cholesky":
        jitter = 1e-10 * max(float(np.mean(np.diag(gram))), 1e-300)
        for _ in range(40):
            try:
                return np.linalg.cholesky(gram + jitter * np.eye(size))
            except np.linalg.LinAlgError:
                jitter *= 10.0
        raise np.linalg.LinAlgError("no jitter made the Gram matrix positive definite")
    raise ValueError(f"mmd_factor must be one of {FACTORS}, got {kind!r}")

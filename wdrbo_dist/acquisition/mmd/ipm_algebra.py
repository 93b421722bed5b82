"""The linear algebra of mmd_ipm.py's interior-point method, compiled: dense Cholesky factors and
products, the second-order cone's scaling W, step length and division, and the KKT system of a
Newton step (the factored normal matrix, iterative refinement).

mmd_ipm.py's kernels compile these into theirs, and numba's cache checks only the file of the
kernel it loads: after an edit here, delete mmd_ipm.py's cache (`__pycache__/mmd_ipm.*`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

REFINEMENTS = 1  # iterative refinement steps per KKT solve (coneqp's default with a cone)


@njit(cache=True)
def dot(left: np.ndarray, right: np.ndarray) -> float:
    """A loop: numba's np.dot calls BLAS, ~1 us a call at these sizes."""
    total = 0.0
    for i in range(left.shape[0]):
        total += left[i] * right[i]
    return total


@njit(cache=True)
def _factor(matrix: np.ndarray, lower: np.ndarray) -> bool:
    """Cholesky: `lower` (lower triangle) of a symmetric positive definite matrix; False if not."""
    size = matrix.shape[0]
    for j in range(size):
        total = matrix[j, j]
        for k in range(j):
            total -= lower[j, k] * lower[j, k]
        if not total > 0.0:
            return False
        root = math.sqrt(total)
        lower[j, j] = root
        for i in range(j + 1, size):
            value = matrix[i, j]
            for k in range(j):
                value -= lower[i, k] * lower[j, k]
            lower[i, j] = value / root
    return True


@njit(cache=True)
def _factor_solve(lower: np.ndarray, vector: np.ndarray) -> None:
    """vector <- (L L^T)^-1 vector."""
    size = lower.shape[0]
    for i in range(size):
        value = vector[i]
        for k in range(i):
            value -= lower[i, k] * vector[k]
        vector[i] = value / lower[i, i]
    for i in range(size - 1, -1, -1):
        value = vector[i]
        for k in range(i + 1, size):
            value -= lower[k, i] * vector[k]
        vector[i] = value / lower[i, i]


@njit(cache=True)
def product(matrix: np.ndarray, vector: np.ndarray, out: np.ndarray) -> None:
    """out <- matrix @ vector."""
    for i in range(matrix.shape[0]):
        total = 0.0
        for j in range(matrix.shape[1]):
            total += matrix[i, j] * vector[j]
        out[i] = total


@njit(cache=True)
def product_t(matrix: np.ndarray, vector: np.ndarray, out: np.ndarray) -> None:
    """out <- matrix.T @ vector."""
    out[:] = 0.0
    for i in range(matrix.shape[0]):
        value = vector[i]
        for j in range(matrix.shape[1]):
            out[j] += matrix[i, j] * value


@njit(cache=True)
def cone_scale(v: np.ndarray, beta: float, power: int, vector: np.ndarray, out: np.ndarray) -> None:
    """out <- W^power vector for the cone's W = beta (2 v v^T - J), power in {1, -1, 2, -2}
    (W^-1 = (2 u u^T - J) / beta with u = J v; J = diag(1, -1, ..., -1))."""
    sign = 1.0 if power > 0 else -1.0  # u = J v: its tail's sign
    factor = beta if power > 0 else 1.0 / beta
    out[:] = vector
    for _ in range(abs(power)):
        weight = v[0] * out[0]
        for i in range(1, v.shape[0]):
            weight += sign * v[i] * out[i]
        weight *= 2.0
        out[0] = factor * (weight * v[0] - out[0])
        for i in range(1, v.shape[0]):
            out[i] = factor * (weight * sign * v[i] + out[i])


@njit(cache=True)
def _soc_step(point: np.ndarray, direction: np.ndarray) -> float:
    """The largest t with point + t direction in the cone (point inside it); inf if none bounds it."""
    a = direction[0] * direction[0]
    b = point[0] * direction[0]
    c = point[0] * point[0]
    for i in range(1, point.shape[0]):
        a -= direction[i] * direction[i]
        b -= point[i] * direction[i]
        c -= point[i] * point[i]
    # det(point + t direction) = a t^2 + 2 b t + c, positive at t = 0: its first positive root
    best = np.inf
    if a == 0.0:
        if b < 0.0:
            best = -c / (2.0 * b)
    else:
        disc = b * b - a * c
        if disc >= 0.0:
            root = math.sqrt(disc)
            t = -(b + root) if b >= 0.0 else -(b - root)
            if t / a > 0.0:
                best = t / a
            if t != 0.0 and 0.0 < c / t < best:
                best = c / t
    if direction[0] < 0.0:  # the head must stay positive (the cone's other sheet)
        best = min(best, -point[0] / direction[0])
    return best


@njit(cache=True)
def max_step(lam_x: np.ndarray, lam_c: np.ndarray, dir_x: np.ndarray, dir_c: np.ndarray) -> float:
    best = _soc_step(lam_c, dir_c)
    for i in range(lam_x.shape[0]):
        if dir_x[i] < 0.0:
            best = min(best, -lam_x[i] / dir_x[i])
    return best


@njit(cache=True)
def soc_divide(lam: np.ndarray, r: np.ndarray, out: np.ndarray) -> None:
    r"""out <- lam o\ r: the x with lam o x = r in the cone's Jordan algebra (lam inside the cone)."""
    det = lam[0] * lam[0]
    inner = 0.0
    for i in range(1, lam.shape[0]):
        det -= lam[i] * lam[i]
        inner += lam[i] * r[i]
    out[0] = (lam[0] * r[0] - inner) / det
    scale = (inner / lam[0] - r[0]) / det
    for i in range(1, lam.shape[0]):
        out[i] = r[i] / lam[0] + scale * lam[i]


@njit(cache=True)
def shift_inside(point_x: np.ndarray, point_c: np.ndarray) -> None:
    """Moves a starting point into the cones' interior along their identity, as `coneqp` does."""
    smallest = point_c[0] - math.sqrt(dot(point_c[1:], point_c[1:]))
    for i in range(point_x.shape[0]):
        smallest = min(smallest, point_x[i])
    norm = math.sqrt(dot(point_x, point_x) + dot(point_c, point_c))
    if -smallest >= -1e-8 * max(norm, 1.0):
        point_x += 1.0 - smallest
        point_c[0] += 1.0 - smallest


@njit(cache=True)
def _kkt_solve(
    lower: np.ndarray, lower_s: np.ndarray, hi_at: np.ndarray, a: np.ndarray, g: np.ndarray,
    d2: np.ndarray, v: np.ndarray, beta: float,
    bx: np.ndarray, by: np.ndarray, bz_x: np.ndarray, bz_c: np.ndarray,
    dx: np.ndarray, dy: np.ndarray, dz_x: np.ndarray, dz_c: np.ndarray, buffer_m: np.ndarray,
) -> None:
    """(dx, dy, dz) of [0 A^T Gf^T; A 0 0; Gf 0 -W^T W] [dx; dy; dz] = [bx; by; bz], Gf = [-I; G],
    W^T W = diag(d2) on the nonnegative part: through the factored normal matrix H = Gf^T W^-2 Gf
    and the Schur complement A H^-1 A^T."""
    n, p = dx.shape[0], dy.shape[0]
    cone_scale(v, beta, -2, bz_c, buffer_m)
    product_t(g, buffer_m, dx)
    for i in range(n):
        dx[i] += bx[i] - bz_x[i] / d2[i]
    _factor_solve(lower, dx)  # H^-1 rhs
    product(a, dx, dy)
    for j in range(p):
        dy[j] -= by[j]
    _factor_solve(lower_s, dy)
    for i in range(n):
        for j in range(p):
            dx[i] -= hi_at[i, j] * dy[j]
    for i in range(n):
        dz_x[i] = (-dx[i] - bz_x[i]) / d2[i]
    product(g, dx, buffer_m)
    buffer_m -= bz_c
    cone_scale(v, beta, -2, buffer_m, dz_c)


@njit(cache=True)
def kkt_refined(
    lower: np.ndarray, lower_s: np.ndarray, hi_at: np.ndarray, a: np.ndarray, g: np.ndarray,
    d2: np.ndarray, v: np.ndarray, beta: float,
    bx: np.ndarray, by: np.ndarray, bz_x: np.ndarray, bz_c: np.ndarray,
    dx: np.ndarray, dy: np.ndarray, dz_x: np.ndarray, dz_c: np.ndarray, scratch: np.ndarray,
) -> None:
    """`_kkt_solve` and REFINEMENTS steps of iterative refinement on the complete KKT system: the
    normal matrix squares the system's condition number, which near the optimum lost the primal
    residual 1e-9 -> 1e-6 per iteration without them."""
    n, p, m = dx.shape[0], dy.shape[0], dz_c.shape[0]
    # scratch [4 n + 2 p + 3 m]: views, not allocations (a few hundred per program otherwise)
    buffer_m = scratch[:m]
    _kkt_solve(lower, lower_s, hi_at, a, g, d2, v, beta, bx, by, bz_x, bz_c, dx, dy, dz_x, dz_c, buffer_m)
    if REFINEMENTS == 0:
        return
    ex, ez_x = scratch[m : m + n], scratch[m + n : m + 2 * n]
    cx, cz_x = scratch[m + 2 * n : m + 3 * n], scratch[m + 3 * n : m + 4 * n]
    start = m + 4 * n
    ey, cy = scratch[start : start + p], scratch[start + p : start + 2 * p]
    start += 2 * p
    ez_c, cz_c = scratch[start : start + m], scratch[start + m : start + 2 * m]
    for _ in range(REFINEMENTS):
        product_t(a, dy, ex)
        product_t(g, dz_c, cx)
        for i in range(n):
            ex[i] = bx[i] - ex[i] + dz_x[i] - cx[i]
        product(a, dx, ey)
        for j in range(p):
            ey[j] = by[j] - ey[j]
        for i in range(n):
            ez_x[i] = bz_x[i] + dx[i] + d2[i] * dz_x[i]
        product(g, dx, ez_c)
        cone_scale(v, beta, 2, dz_c, buffer_m)
        for i in range(m):
            ez_c[i] = bz_c[i] - ez_c[i] + buffer_m[i]
        _kkt_solve(lower, lower_s, hi_at, a, g, d2, v, beta, ex, ey, ez_x, ez_c, cx, cy, cz_x, cz_c, buffer_m)
        dx += cx
        dy += cy
        dz_x += cz_x
        dz_c += cz_c


@njit(cache=True)
def factor_normal(
    gram: np.ndarray, g: np.ndarray, a: np.ndarray, d2: np.ndarray, v: np.ndarray, beta: float,
    hmat: np.ndarray, lower: np.ndarray, hi_at: np.ndarray, lower_s: np.ndarray,
    u: np.ndarray, gu: np.ndarray, gv: np.ndarray, column: np.ndarray, schur: np.ndarray,
) -> bool:
    """Factors H = diag(1 / d2) + G^T W^-2 G, with W^-2 = (4 (u.u) u u^T - 2 u v^T - 2 v u^T + I) / beta^2
    (u = J v), and the Schur complement A H^-1 A^T; False where either is not positive definite.
    u [m], gu, gv, column [n] and schur [p, p]: the caller's buffers."""
    n, p = g.shape[1], a.shape[0]
    u[0] = v[0]
    for i in range(1, u.shape[0]):
        u[i] = -v[i]
    product_t(g, u, gu)
    product_t(g, v, gv)
    uu = dot(u, u)
    inv_beta2 = 1.0 / (beta * beta)
    for i in range(n):
        for j in range(i + 1):
            value = inv_beta2 * (gram[i, j] + 4.0 * uu * gu[i] * gu[j] - 2.0 * (gu[i] * gv[j] + gv[i] * gu[j]))
            hmat[i, j] = value
            hmat[j, i] = value
        hmat[i, i] += 1.0 / d2[i]
    if not _factor(hmat, lower):
        return False
    for j in range(p):
        column[:] = a[j]
        _factor_solve(lower, column)
        hi_at[:, j] = column
        for k in range(p):
            schur[k, j] = dot(a[k], column)
    return _factor(schur, lower_s)

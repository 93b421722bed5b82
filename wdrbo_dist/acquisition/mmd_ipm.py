"""A compiled interior-point solver for the working set's restricted programs (`mmd_restricted_solver`).

Why: an Ackley run of DRBO-MMD solves about 40,000 restricted programs of a handful of
variables, one equality row and one small second-order cone, and Clarabel spends most of its
time on such a program in the fixed costs of its sparse machinery. This dense primal-dual method
(CVXOPT's `coneqp` on this shape), compiled with numba, does the same work a few times faster;
the caller (mmd_working_set.py) certifies every answer against the complete program. The
comment above `solve_restricted` states the program and the method.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

TOLERANCE = 1e-9  # primal and dual residuals (relative) and the duality gap (absolute and relative)
MAX_ITERATIONS = 60
STEP_FRACTION = 0.99  # of the largest step to the cone's boundary
REFINEMENTS = 1  # iterative refinement steps per KKT solve (coneqp's default with a cone)
SOLVED, NOT_SOLVED = 0, 1


@njit(cache=True)
def _dot(left: np.ndarray, right: np.ndarray) -> float:
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
def _product(matrix: np.ndarray, vector: np.ndarray, out: np.ndarray) -> None:
    """out <- matrix @ vector."""
    for i in range(matrix.shape[0]):
        total = 0.0
        for j in range(matrix.shape[1]):
            total += matrix[i, j] * vector[j]
        out[i] = total


@njit(cache=True)
def _product_t(matrix: np.ndarray, vector: np.ndarray, out: np.ndarray) -> None:
    """out <- matrix.T @ vector."""
    out[:] = 0.0
    for i in range(matrix.shape[0]):
        value = vector[i]
        for j in range(matrix.shape[1]):
            out[j] += matrix[i, j] * value


@njit(cache=True)
def _scale(v: np.ndarray, beta: float, power: int, vector: np.ndarray, out: np.ndarray) -> None:
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
def _max_step(lam_x: np.ndarray, lam_c: np.ndarray, dir_x: np.ndarray, dir_c: np.ndarray) -> float:
    best = _soc_step(lam_c, dir_c)
    for i in range(lam_x.shape[0]):
        if dir_x[i] < 0.0:
            best = min(best, -lam_x[i] / dir_x[i])
    return best


@njit(cache=True)
def _soc_divide(lam: np.ndarray, r: np.ndarray, out: np.ndarray) -> None:
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
def _shift_inside(point_x: np.ndarray, point_c: np.ndarray) -> None:
    """Moves a starting point into the cones' interior along their identity, as `coneqp` does."""
    smallest = point_c[0] - math.sqrt(_dot(point_c[1:], point_c[1:]))
    for i in range(point_x.shape[0]):
        smallest = min(smallest, point_x[i])
    norm = math.sqrt(_dot(point_x, point_x) + _dot(point_c, point_c))
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
    _scale(v, beta, -2, bz_c, buffer_m)
    _product_t(g, buffer_m, dx)
    for i in range(n):
        dx[i] += bx[i] - bz_x[i] / d2[i]
    _factor_solve(lower, dx)  # H^-1 rhs
    _product(a, dx, dy)
    for j in range(p):
        dy[j] -= by[j]
    _factor_solve(lower_s, dy)
    for i in range(n):
        for j in range(p):
            dx[i] -= hi_at[i, j] * dy[j]
    for i in range(n):
        dz_x[i] = (-dx[i] - bz_x[i]) / d2[i]
    _product(g, dx, buffer_m)
    buffer_m -= bz_c
    _scale(v, beta, -2, buffer_m, dz_c)


@njit(cache=True)
def _kkt_refined(
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
        _product_t(a, dy, ex)
        _product_t(g, dz_c, cx)
        for i in range(n):
            ex[i] = bx[i] - ex[i] + dz_x[i] - cx[i]
        _product(a, dx, ey)
        for j in range(p):
            ey[j] = by[j] - ey[j]
        for i in range(n):
            ez_x[i] = bz_x[i] + dx[i] + d2[i] * dz_x[i]
        _product(g, dx, ez_c)
        _scale(v, beta, 2, dz_c, buffer_m)
        for i in range(m):
            ez_c[i] = bz_c[i] - ez_c[i] + buffer_m[i]
        _kkt_solve(lower, lower_s, hi_at, a, g, d2, v, beta, ex, ey, ez_x, ez_c, cx, cy, cz_x, cz_c, buffer_m)
        dx += cx
        dy += cy
        dz_x += cz_x
        dz_c += cz_c


@njit(cache=True)
def _factor_normal(
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
    _product_t(g, u, gu)
    _product_t(g, v, gv)
    uu = _dot(u, u)
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
            schur[k, j] = _dot(a[k], column)
    return _factor(schur, lower_s)


# Why: a restricted program of DRBO-MMD's working set has a handful of variables (the working set
# and the aggregate), one equality row and one second-order cone of a few rows, and an Ackley run
# solves about 40,000 of them. Clarabel, a general sparse solver, spends most of its time on such
# a program in the fixed costs of its sparse machinery and of the Python around it. This dense
# primal-dual method, compiled with numba, does the same work a few times faster: CVXOPT's `coneqp` for a linear objective
# (Vandenberghe, "The CVXOPT linear and quadratic cone program solvers", 2010) on this shape, with
# Nesterov-Todd scaling (diagonal on the nonnegative part, a rank-one update of J on the cone),
# Mehrotra's predictor-corrector, a normal matrix built from the cone rows' Gram matrix G^T G
# once per program plus two rank-one terms per iteration, and one step of iterative refinement.
#
# The program, with x [n], A [p, n], G [m, n] (the cone's head first):
#
#     min c^T x   s.t.   A x = b,   x >= 0,   h - G x in SOC_m
#
# and its dual in Clarabel's convention: c + A^T y - z_x + G^T z = 0 with z_x >= 0, z in SOC_m.
# The caller (mmd_working_set.py) certifies every answer against the complete program, and solves
# the complete program with Clarabel where this one reports no solution.
@njit(cache=True)
def solve_restricted(
    c: np.ndarray, a: np.ndarray, b: np.ndarray, g: np.ndarray, h: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int]:
    """(status, x [n], y [p], z [m], iterations) of the program in the module docstring."""
    n, p, m = c.shape[0], a.shape[0], g.shape[0]
    gram = np.zeros((n, n))
    for i in range(m):
        for j in range(n):
            for k in range(j + 1):
                gram[j, k] += g[i, j] * g[i, k]
    for j in range(n):
        for k in range(j):
            gram[k, j] = gram[j, k]
    scale_primal = max(1.0, math.sqrt(_dot(b, b) + _dot(h, h)))
    scale_dual = max(1.0, math.sqrt(_dot(c, c)))
    degree = n + 1.0
    x, y = np.zeros(n), np.zeros(p)
    s_x, s_c, z_x, z_c = np.zeros(n), np.zeros(m), np.zeros(n), np.zeros(m)
    hmat, lower, lower_s, hi_at = np.empty((n, n)), np.zeros((n, n)), np.zeros((p, p)), np.empty((n, p))
    d2, v = np.ones(n), np.zeros(m)
    dx, dy, dz_x, dz_c = np.empty(n), np.empty(p), np.empty(n), np.empty(m)
    zeros_n, zeros_p, zeros_m = np.zeros(n), np.zeros(p), np.zeros(m)

    # coneqp's start: two solves with W = I (v = e: 2 v v^T - J = I), both points moved inside
    v[0] = 1.0
    normal = (np.empty(m), np.empty(n), np.empty(n), np.empty(n), np.empty((p, p)))  # _factor_normal's buffers
    scratch = np.empty(4 * n + 2 * p + 3 * m)  # _kkt_refined's
    if not _factor_normal(gram, g, a, d2, v, 1.0, hmat, lower, hi_at, lower_s, *normal):
        return NOT_SOLVED, x, y, z_c, 0
    _kkt_refined(lower, lower_s, hi_at, a, g, d2, v, 1.0, zeros_n, b, zeros_n, h, x, dy, dz_x, dz_c, scratch)
    s_x[:] = -dz_x
    s_c[:] = -dz_c
    _shift_inside(s_x, s_c)
    minus_c = -c
    _kkt_refined(lower, lower_s, hi_at, a, g, d2, v, 1.0, minus_c, zeros_p, zeros_n, zeros_m, dx, y, z_x, z_c, scratch)
    _shift_inside(z_x, z_c)

    rx, ry, rz_x, rz_c = np.empty(n), np.empty(p), np.empty(n), np.empty(m)
    lam_x, lam_c = np.empty(n), np.empty(m)
    rc_x, rc_c, q_x, q_c = np.empty(n), np.empty(m), np.empty(n), np.empty(m)
    bz_x, bz_c = np.empty(n), np.empty(m)
    dsa_x, dsa_c, dza_x, dza_c = np.empty(n), np.empty(m), np.empty(n), np.empty(m)
    ws_x, ws_c, wz_x, wz_c = np.empty(n), np.empty(m), np.empty(n), np.empty(m)
    buffer_n, buffer_m, buffer_m2, minus_ry = np.empty(n), np.empty(m), np.empty(m), np.empty(p)
    for iteration in range(MAX_ITERATIONS):
        _product_t(a, y, rx)
        _product_t(g, z_c, buffer_n)
        for i in range(n):
            rx[i] += c[i] - z_x[i] + buffer_n[i]
        _product(a, x, ry)
        ry -= b
        for i in range(n):
            rz_x[i] = s_x[i] - x[i]
        _product(g, x, rz_c)
        for i in range(m):
            rz_c[i] += s_c[i] - h[i]
        gap = _dot(s_x, z_x) + _dot(s_c, z_c)
        primal_cost = _dot(c, x)
        dual_cost = -_dot(b, y) - _dot(h, z_c)
        primal_residual = math.sqrt(_dot(ry, ry) + _dot(rz_x, rz_x) + _dot(rz_c, rz_c)) / scale_primal
        dual_residual = math.sqrt(_dot(rx, rx)) / scale_dual
        relative_gap = np.inf
        if primal_cost < 0.0:
            relative_gap = gap / -primal_cost
        elif dual_cost > 0.0:
            relative_gap = gap / dual_cost
        if primal_residual <= TOLERANCE and dual_residual <= TOLERANCE and min(gap, relative_gap) <= TOLERANCE:
            return SOLVED, x, y, z_c, iteration
        mu = gap / degree

        # Nesterov-Todd scaling: W z = W^-T s = lam; the nonnegative part's W^T W = diag(s / z)
        for i in range(n):
            d2[i] = s_x[i] / z_x[i]
            lam_x[i] = math.sqrt(s_x[i] * z_x[i])
        s_det = s_c[0] * s_c[0] - _dot(s_c[1:], s_c[1:])
        z_det = z_c[0] * z_c[0] - _dot(z_c[1:], z_c[1:])
        if not (s_det > 0.0 and z_det > 0.0):
            return NOT_SOLVED, x, y, z_c, iteration
        s_norm, z_norm = math.sqrt(s_det), math.sqrt(z_det)
        beta = math.sqrt(s_norm / z_norm)
        gamma = math.sqrt(0.5 * (1.0 + _dot(s_c, z_c) / (s_norm * z_norm)))
        # w = (s / |s| + J z / |z|) / (2 gamma), then v = (w + e) / sqrt(2 (w_0 + 1))
        head = (s_c[0] / s_norm + z_c[0] / z_norm) / (2.0 * gamma)
        norm_v = math.sqrt(2.0 * (head + 1.0))
        v[0] = (head + 1.0) / norm_v
        for i in range(1, m):
            v[i] = (s_c[i] / s_norm - z_c[i] / z_norm) / (2.0 * gamma) / norm_v
        _scale(v, beta, 1, z_c, lam_c)
        if not _factor_normal(gram, g, a, d2, v, beta, hmat, lower, hi_at, lower_s, *normal):
            return NOT_SOLVED, x, y, z_c, iteration

        # Mehrotra: the affine direction (sigma = 0), then the combined one with sigma = (1 - step)^3
        dsa_x[:] = 0.0
        dsa_c[:] = 0.0
        dza_x[:] = 0.0
        dza_c[:] = 0.0
        sigma = 0.0
        for phase in range(2):
            # rc = -lam o lam - dsa o dza + sigma mu e (scaled space); q = lam o\ rc
            for i in range(n):
                rc_x[i] = -lam_x[i] * lam_x[i] - dsa_x[i] * dza_x[i] + sigma * mu
                q_x[i] = rc_x[i] / lam_x[i]
            rc_c[0] = -_dot(lam_c, lam_c) - _dot(dsa_c, dza_c) + sigma * mu
            for i in range(1, m):
                rc_c[i] = -2.0 * lam_c[0] * lam_c[i] - dsa_c[0] * dza_c[i] - dza_c[0] * dsa_c[i]
            _soc_divide(lam_c, rc_c, q_c)
            # bz = -rz - W q
            for i in range(n):
                bz_x[i] = -rz_x[i] - math.sqrt(d2[i]) * q_x[i]
            _scale(v, beta, 1, q_c, buffer_m2)
            for i in range(m):
                bz_c[i] = -rz_c[i] - buffer_m2[i]
            for i in range(n):
                buffer_n[i] = -rx[i]
            for j in range(p):
                minus_ry[j] = -ry[j]
            _kkt_refined(lower, lower_s, hi_at, a, g, d2, v, beta, buffer_n, minus_ry, bz_x, bz_c, dx, dy, dz_x, dz_c,
                         scratch)
            # scaled directions: dz~ = W dz, ds~ = q - dz~
            for i in range(n):
                wz_x[i] = math.sqrt(d2[i]) * dz_x[i]
                ws_x[i] = q_x[i] - wz_x[i]
            _scale(v, beta, 1, dz_c, wz_c)
            for i in range(m):
                ws_c[i] = q_c[i] - wz_c[i]
            step = min(_max_step(lam_x, lam_c, ws_x, ws_c), _max_step(lam_x, lam_c, wz_x, wz_c))
            if phase == 0:
                sigma = (1.0 - min(1.0, step)) ** 3
                dsa_x[:] = ws_x
                dsa_c[:] = ws_c
                dza_x[:] = wz_x
                dza_c[:] = wz_c
                continue
            step = min(1.0, STEP_FRACTION * step)
            _scale(v, beta, 1, ws_c, buffer_m)  # ds = W ds~
            for i in range(n):
                x[i] += step * dx[i]
                s_x[i] += step * math.sqrt(d2[i]) * ws_x[i]
                z_x[i] += step * dz_x[i]
            for j in range(p):
                y[j] += step * dy[j]
            for i in range(m):
                s_c[i] += step * buffer_m[i]
                z_c[i] += step * dz_c[i]
    return NOT_SOLVED, x, y, z_c, MAX_ITERATIONS


@njit(cache=True)
def certified_rounds(
    c: np.ndarray, aggregate_cost: float, support_guess: np.ndarray, dual_guess: np.ndarray,
    by_variable: np.ndarray, dual_rows: np.ndarray, centre: np.ndarray, b_eq: np.ndarray, b_cone: np.ndarray,
    tolerance: float, max_rounds: int, added_per_round: int, max_size: int, support_threshold: float,
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, int]:
    """mmd_working_set.WorkingSetSolver's rounds with this module's restricted solves, compiled
    whole: (certified, solution, its support, the dual, restricted programs solved).

    The same operations as the Python rounds in the same order (LAPACK's QR and BLAS's products
    reached through numba are the ones SciPy and NumPy call), so the same solutions to the bit
    (tests/acquisition/test_mmd_working_set.py); what is gone is the Python between them, which
    took more time than the restricted solves themselves. `dual_guess` of length 0: none."""
    n, zero = c.shape[0], b_eq.shape[0]
    chosen = np.zeros(n, dtype=np.bool_)
    chosen[np.argmin(c)] = True
    for j in support_guess:
        chosen[j] = True
    if dual_guess.shape[0] > 0:
        guessed = c + np.dot(dual_rows.T, dual_guess)
        lowest = np.argmin(guessed)
        if guessed[lowest] < -tolerance:
            chosen[lowest] = True
    programs = 0
    tail = b_cone.shape[0] - 1
    for _ in range(max_rounds):
        working = np.nonzero(chosen)[0]
        k = working.shape[0]
        if k > max_size:
            return False, centre, support_guess, dual_guess, programs  # (no answer: the arrays are placeholders)
        k1 = k + 1
        columns = np.empty((k1, by_variable.shape[1]))
        cost = np.empty(k1)
        for i in range(k):
            columns[i] = by_variable[working[i]]
            cost[i] = c[working[i]]
        columns[k] = by_variable[n]
        cost[k] = aggregate_cost
        stacked = np.empty((tail, k1 + 1))  # the cone's rows after its head: the columns, then b
        for j in range(k1):
            stacked[:, j] = columns[j, zero + 1 :]
        stacked[:, k1] = b_cone[1:]
        q, r = np.linalg.qr(stacked)
        programs += 1
        g = np.empty((1 + r.shape[0], k1))
        g[0] = columns[:, zero]
        g[1:] = r[:, :k1]
        h = np.empty(1 + r.shape[0])
        h[0] = b_cone[0]
        h[1:] = r[:, k1]
        status, x, y, z, _ = solve_restricted(cost, np.ascontiguousarray(columns[:, :zero].T), b_eq, g, h)
        if status != SOLVED:
            return False, centre, support_guess, dual_guess, programs
        dual = np.empty(zero + 1 + q.shape[0])
        dual[:zero] = y
        dual[zero] = z[0]
        # Q's layout as the Python rounds have it (thin_qr's column-major Q; NumPy's row-major Q of
        # a wide block): BLAS sums Q z in another order for each
        tail_dual = np.ascontiguousarray(z[1:])
        if tail >= k1 + 1:
            dual[zero + 1 :] = np.dot(np.asfortranarray(q), tail_dual)
        else:
            dual[zero + 1 :] = np.dot(np.ascontiguousarray(q), tail_dual)
        reduced = c + np.dot(dual_rows.T, dual)
        for i in range(k):
            reduced[working[i]] = np.inf
        violators = np.nonzero(reduced < -tolerance)[0]
        if violators.shape[0] == 0:
            solution = x[k] * centre
            for i in range(k):
                solution[working[i]] += x[i]
            return True, solution, working[x[:k] > support_threshold], dual, programs
        order = np.argsort(reduced[violators])
        for j in order[:added_per_round]:
            chosen[violators[j]] = True
    return False, centre, support_guess, dual_guess, programs

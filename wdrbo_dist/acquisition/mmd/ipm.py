"""A compiled interior-point solver for the working set's restricted programs, and its rounds.

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

from wdrbo_dist.acquisition.mmd.ipm_algebra import (
    cone_scale,
    dot,
    factor_normal,
    kkt_refined,
    max_step,
    product,
    product_t,
    shift_inside,
    soc_divide,
)

TOLERANCE = 1e-9  # primal and dual residuals (relative) and the duality gap (absolute and relative)
MAX_ITERATIONS = 60
STEP_FRACTION = 0.99  # of the largest step to the cone's boundary
SOLVED, NOT_SOLVED = 0, 1


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
    scale_primal = max(1.0, math.sqrt(dot(b, b) + dot(h, h)))
    scale_dual = max(1.0, math.sqrt(dot(c, c)))
    degree = n + 1.0
    x, y = np.zeros(n), np.zeros(p)
    s_x, s_c, z_x, z_c = np.zeros(n), np.zeros(m), np.zeros(n), np.zeros(m)
    hmat, lower, lower_s, hi_at = np.empty((n, n)), np.zeros((n, n)), np.zeros((p, p)), np.empty((n, p))
    d2, v = np.ones(n), np.zeros(m)
    dx, dy, dz_x, dz_c = np.empty(n), np.empty(p), np.empty(n), np.empty(m)
    zeros_n, zeros_p, zeros_m = np.zeros(n), np.zeros(p), np.zeros(m)

    # coneqp's start: two solves with W = I (v = e: 2 v v^T - J = I), both points moved inside
    v[0] = 1.0
    normal = (np.empty(m), np.empty(n), np.empty(n), np.empty(n), np.empty((p, p)))  # factor_normal's buffers
    scratch = np.empty(4 * n + 2 * p + 3 * m)  # kkt_refined's
    if not factor_normal(gram, g, a, d2, v, 1.0, hmat, lower, hi_at, lower_s, *normal):
        return NOT_SOLVED, x, y, z_c, 0
    kkt_refined(lower, lower_s, hi_at, a, g, d2, v, 1.0, zeros_n, b, zeros_n, h, x, dy, dz_x, dz_c, scratch)
    s_x[:] = -dz_x
    s_c[:] = -dz_c
    shift_inside(s_x, s_c)
    minus_c = -c
    kkt_refined(lower, lower_s, hi_at, a, g, d2, v, 1.0, minus_c, zeros_p, zeros_n, zeros_m, dx, y, z_x, z_c, scratch)
    shift_inside(z_x, z_c)

    rx, ry, rz_x, rz_c = np.empty(n), np.empty(p), np.empty(n), np.empty(m)
    lam_x, lam_c = np.empty(n), np.empty(m)
    rc_x, rc_c, q_x, q_c = np.empty(n), np.empty(m), np.empty(n), np.empty(m)
    bz_x, bz_c = np.empty(n), np.empty(m)
    dsa_x, dsa_c, dza_x, dza_c = np.empty(n), np.empty(m), np.empty(n), np.empty(m)
    ws_x, ws_c, wz_x, wz_c = np.empty(n), np.empty(m), np.empty(n), np.empty(m)
    buffer_n, buffer_m, buffer_m2, minus_ry = np.empty(n), np.empty(m), np.empty(m), np.empty(p)
    for iteration in range(MAX_ITERATIONS):
        product_t(a, y, rx)
        product_t(g, z_c, buffer_n)
        for i in range(n):
            rx[i] += c[i] - z_x[i] + buffer_n[i]
        product(a, x, ry)
        ry -= b
        for i in range(n):
            rz_x[i] = s_x[i] - x[i]
        product(g, x, rz_c)
        for i in range(m):
            rz_c[i] += s_c[i] - h[i]
        gap = dot(s_x, z_x) + dot(s_c, z_c)
        primal_cost = dot(c, x)
        dual_cost = -dot(b, y) - dot(h, z_c)
        primal_residual = math.sqrt(dot(ry, ry) + dot(rz_x, rz_x) + dot(rz_c, rz_c)) / scale_primal
        dual_residual = math.sqrt(dot(rx, rx)) / scale_dual
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
        s_det = s_c[0] * s_c[0] - dot(s_c[1:], s_c[1:])
        z_det = z_c[0] * z_c[0] - dot(z_c[1:], z_c[1:])
        if not (s_det > 0.0 and z_det > 0.0):
            return NOT_SOLVED, x, y, z_c, iteration
        s_norm, z_norm = math.sqrt(s_det), math.sqrt(z_det)
        beta = math.sqrt(s_norm / z_norm)
        gamma = math.sqrt(0.5 * (1.0 + dot(s_c, z_c) / (s_norm * z_norm)))
        # w = (s / |s| + J z / |z|) / (2 gamma), then v = (w + e) / sqrt(2 (w_0 + 1))
        head = (s_c[0] / s_norm + z_c[0] / z_norm) / (2.0 * gamma)
        norm_v = math.sqrt(2.0 * (head + 1.0))
        v[0] = (head + 1.0) / norm_v
        for i in range(1, m):
            v[i] = (s_c[i] / s_norm - z_c[i] / z_norm) / (2.0 * gamma) / norm_v
        cone_scale(v, beta, 1, z_c, lam_c)
        if not factor_normal(gram, g, a, d2, v, beta, hmat, lower, hi_at, lower_s, *normal):
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
            rc_c[0] = -dot(lam_c, lam_c) - dot(dsa_c, dza_c) + sigma * mu
            for i in range(1, m):
                rc_c[i] = -2.0 * lam_c[0] * lam_c[i] - dsa_c[0] * dza_c[i] - dza_c[0] * dsa_c[i]
            soc_divide(lam_c, rc_c, q_c)
            # bz = -rz - W q
            for i in range(n):
                bz_x[i] = -rz_x[i] - math.sqrt(d2[i]) * q_x[i]
            cone_scale(v, beta, 1, q_c, buffer_m2)
            for i in range(m):
                bz_c[i] = -rz_c[i] - buffer_m2[i]
            for i in range(n):
                buffer_n[i] = -rx[i]
            for j in range(p):
                minus_ry[j] = -ry[j]
            kkt_refined(lower, lower_s, hi_at, a, g, d2, v, beta, buffer_n, minus_ry, bz_x, bz_c, dx, dy, dz_x, dz_c,
                         scratch)
            # scaled directions: dz~ = W dz, ds~ = q - dz~
            for i in range(n):
                wz_x[i] = math.sqrt(d2[i]) * dz_x[i]
                ws_x[i] = q_x[i] - wz_x[i]
            cone_scale(v, beta, 1, dz_c, wz_c)
            for i in range(m):
                ws_c[i] = q_c[i] - wz_c[i]
            step = min(max_step(lam_x, lam_c, ws_x, ws_c), max_step(lam_x, lam_c, wz_x, wz_c))
            if phase == 0:
                sigma = (1.0 - min(1.0, step)) ** 3
                dsa_x[:] = ws_x
                dsa_c[:] = ws_c
                dza_x[:] = wz_x
                dza_c[:] = wz_c
                continue
            step = min(1.0, STEP_FRACTION * step)
            cone_scale(v, beta, 1, ws_c, buffer_m)  # ds = W ds~
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
    """The working set's rounds (the comment above mmd_working_set.SimplexConeProgram) with this
    module's restricted solves: (certified, solution, its support, the dual, restricted programs
    solved). Compiled whole: in Python the calls between the solves take more time than the
    solves themselves. `dual_guess` of length 0: none."""
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
        # Q column-major for a tall block, row-major for a wide one: BLAS sums Q z in another order
        # for each, and these are the orders the records were made with
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

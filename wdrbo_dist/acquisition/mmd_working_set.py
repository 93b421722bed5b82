"""A certified working-set solve of DRBO-MMD's compiled conic program.

Why: the worst case p* of the MMD ball puts its mass on a few grid points (median 1-6 of 100
on Ackley and Branin), yet a solve of the complete program factors a KKT system with every grid
point, about 25,000 times per run. Here each candidate solves the program restricted to a small
working set S of its variables (by Clarabel or mmd_ipm.py) and keeps the answer only when it is
certified optimal for the complete program; the comment above `SimplexConeProgram` gives the
restricted program, the certificate and the guesses of S.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import lapack

FEASIBILITY_TOLERANCE = 1e-8  # Clarabel's default tol_feas, the scale of the certificate
WORKSPACE_SIZES = (4, 8, 16, 32)  # restricted programs are padded to the next size
RESTRICTED_SOLVERS = ("compiled", "clarabel")  # mmd_ipm.py's dense method, or Clarabel
MAX_ROUNDS = 12
ADDED_PER_ROUND = 3  # violators that join S per round (more makes every solve slower)
SUPPORT_THRESHOLD = 1e-7  # p_j above this carries over to the next candidate's working set
_NO_SUPPORT, _NO_DUAL = np.zeros(0, dtype=np.int64), np.zeros(0)
_PADDED_SIZE = [next(size for size in WORKSPACE_SIZES if size >= count) for count in range(WORKSPACE_SIZES[-1] + 1)]


@functools.lru_cache(maxsize=None)
def _strictly_lower(size: int) -> np.ndarray:
    return np.tri(size, k=-1, dtype=bool)


def thin_qr(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`numpy.linalg.qr(a)` for a tall a: the same LAPACK calls (dgeqrf, then dorgqr for Q),
    without NumPy's wrapper, which costs as much as the factorisation on these 10-35 x 3-34 blocks.
    Both run LAPACK's unblocked code below 128 columns, so Q and R are NumPy's to the bit
    (tests/acquisition/test_mmd_working_set.py)."""
    if a.shape[0] < a.shape[1]:
        return np.linalg.qr(a)
    factored, tau, _, info = lapack.dgeqrf(a)
    if info != 0:
        raise np.linalg.LinAlgError(f"dgeqrf failed (info {info})")
    r = factored[: a.shape[1]].copy()
    r[_strictly_lower(a.shape[1])] = 0.0  # np.triu's zeros (+0.0), without its index arithmetic
    q, _, info = lapack.dorgqr(factored, tau)
    if info != 0:
        raise np.linalg.LinAlgError(f"dorgqr failed (info {info})")
    return q, r


# Why: the worst case p* of the MMD ball puts its mass on a few grid points (median 1-6 of 100
# on Ackley and Branin), yet a solve of the complete program factors a KKT system with every grid
# point and every row of the Gram factor, about 25,000 times per run. Here each candidate solves
# the same compiled program restricted to a small working set S of its variables, and keeps the
# answer only when the restricted solution is certified optimal for the complete program. The
# restricted programs are solved by Clarabel or (`restricted_solver="compiled"`)
# by the dense interior-point method of mmd_ipm.py: the certificate below is the same for both.
#
# The restricted program: the compiled data (c, A, b, cones) with every variable outside S fixed
# at zero, plus one aggregate variable theta >= 0 along the ball's centre w (the column A w), so
# that the restricted program is always feasible (theta = 1 is the centre). Its second-order-cone
# rows are compressed by a thin QR, [A_cone[:, S], A_cone w, b_cone] = Q R: an orthogonal change
# of coordinates inside the cone (the same constraint, k + 2 rows instead of rank(F) + 1).
#
# The certificate: the restricted dual (z_eq, z_cone), with each variable's bound multiplier set to
# its reduced cost d_j = c_j + a_j^T z, is a dual point of the complete program whose objective is
# the restricted optimum (the bound rows have b = 0), and the restricted primal solution is
# feasible for the complete program. When every d_j >= -tol (tol = the solver's feasibility
# tolerance times max(1, |c|_inf), the scale of its own dual-residual test), that dual point is
# feasible to the solver's tolerance and weak duality makes the restricted solution optimal for
# the complete program. Otherwise the most negative d_j join S and the restricted program is
# solved again; after MAX_ROUNDS rounds, or when S outgrows the largest workspace, the caller
# solves the complete program.
#
# Guesses that make one round enough most of the time: the previous solution's support in the
# same batch row (consecutive Adam steps of one restart move u a little), the argmin of c, and
# the variable the previous dual prices lowest.
@dataclass(frozen=True)
class SimplexConeProgram:
    """A compiled program min c^T x s.t. A_eq x = b_eq, x >= 0, (b_cone - A_cone x) in SOC.

    Dense, in the solver's variable order; `centre` is a feasible point of the program (the
    ball's centre w), the direction of the aggregate variable.
    """

    a_eq: np.ndarray  # [zero rows, n]
    b_eq: np.ndarray
    a_cone: np.ndarray  # [cone rows, n]
    b_cone: np.ndarray
    centre: np.ndarray  # [n]

    @classmethod
    def from_compiled(cls, a: Any, b: np.ndarray, dims: Any, centre: np.ndarray) -> SimplexConeProgram | None:
        """The program of conic data (A, b) with cone sizes `dims`, or None if its layout differs.

        The layout needed: zero-cone rows, then exactly one bound row -x_j >= ... with b = 0 per
        variable (x >= 0), then a single second-order cone.
        """
        dense = np.asarray(a.toarray() if hasattr(a, "toarray") else a, dtype=np.float64)
        zero, nonneg, soc = int(dims.zero), int(dims.nonneg), tuple(int(q) for q in dims.soc)
        n = dense.shape[1]
        if nonneg != n or len(soc) != 1 or dense.shape[0] != zero + nonneg + soc[0]:
            return None
        bounds = dense[zero : zero + nonneg]
        if not (np.array_equal(bounds, -np.eye(n)) and not np.any(b[zero : zero + nonneg])):
            return None
        return cls(
            a_eq=dense[:zero],
            b_eq=np.asarray(b[:zero], dtype=np.float64),
            a_cone=dense[zero + nonneg :],
            b_cone=np.asarray(b[zero + nonneg :], dtype=np.float64),
            centre=np.asarray(centre, dtype=np.float64),
        )


class _RestrictedWorkspace:
    """One Clarabel workspace for restricted programs of up to `size` variables (+ the aggregate).

    The sparsity pattern is fixed (dense equality and cone rows, one bound row per variable), so a
    candidate only updates values: unused slots get a zero column and cost 1, so they sit at 0.
    """

    def __init__(self, size: int, zero_rows: int, equilibrate: bool) -> None:
        import clarabel
        import scipy.sparse as sp

        self.size = size
        self.zero_rows = zero_rows
        n = size + 1
        cone_rows = size + 3  # the leading row and at most size + 2 compressed rows
        self.cone_rows = cone_rows
        column_rows = [np.r_[np.arange(zero_rows), zero_rows + j, zero_rows + n + np.arange(cone_rows)] for j in range(n)]
        length = zero_rows + 1 + cone_rows
        self.values = np.zeros((n, length))
        self.values[:, zero_rows] = -1.0
        self.b = np.zeros(zero_rows + n + cone_rows)
        self.q = np.ones(n)
        a = sp.csc_matrix(
            (self.values.ravel(), np.concatenate(column_rows), np.arange(0, n * length + 1, length)),
            shape=(self.b.shape[0], n),
        )
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        settings.presolve_enable = False  # keeps value updates allowed
        settings.equilibrate_enable = equilibrate
        cones = [clarabel.ZeroConeT(zero_rows), clarabel.NonnegativeConeT(n), clarabel.SecondOrderConeT(cone_rows)]
        self.solver = clarabel.DefaultSolver(sp.csc_matrix((n, n)), np.ones(n), a, self.b, cones, settings)
        # the used slots for k variables: 0..k-1, then the aggregate column (np.r_ costs more than a solve's setup)
        self._slots = [np.append(np.arange(k), size) for k in range(size + 1)]

    def solve(
        self, eq_t: np.ndarray, b_eq: np.ndarray, cone_first: np.ndarray, b_first: float, r: np.ndarray, cost: np.ndarray
    ) -> tuple[str, np.ndarray, np.ndarray]:
        """(status, x [k + 1], z) for k used slots: columns `eq_t.T` [zero, k + 1], cone rows (first, R)."""
        z0, k1 = self.zero_rows, cost.shape[0]
        k, m = k1 - 1, r.shape[0]
        values, b = self.values, self.b
        values[:, :z0] = 0.0
        values[:, z0 + 1 :] = 0.0
        slots = self._slots[k]
        values[slots, :z0] = eq_t
        values[slots, z0 + 1] = cone_first
        values[slots, z0 + 2 : z0 + 2 + m] = r[:, :k1].T
        n = self.size + 1
        b.fill(0.0)
        b[:z0] = b_eq
        b[z0 + n] = b_first
        b[z0 + n + 1 : z0 + n + 1 + m] = r[:, k1]
        q = self.q
        q.fill(1.0)
        q[slots] = cost
        self.solver.update(q=q, A=values.ravel(), b=b)  # Clarabel copies what it is given
        result = self.solver.solve()
        x = np.array(result.x)[slots]
        return str(result.status), x, np.array(result.z)


@dataclass
class _Memory:
    """What the previous solves of a BO step leave for the next candidates' guesses."""

    support: dict[Hashable, np.ndarray] = field(default_factory=dict)
    dual: dict[Hashable, np.ndarray] = field(default_factory=dict)
    last_dual: np.ndarray | None = None


class WorkingSetSolver:
    """Solves a `SimplexConeProgram` per objective vector c, or says it could not (None)."""

    def __init__(
        self, equilibrate: bool = False, tolerance: float = FEASIBILITY_TOLERANCE, restricted_solver: str = "clarabel"
    ) -> None:
        if restricted_solver not in RESTRICTED_SOLVERS:
            raise ValueError(f"restricted_solver must be one of {RESTRICTED_SOLVERS}, got {restricted_solver!r}")
        self.equilibrate = equilibrate
        self.tolerance = tolerance
        self.restricted_solver = restricted_solver
        self.programs = 0  # restricted conic programs solved (telemetry)
        self._workspaces: dict[tuple[int, int], _RestrictedWorkspace] = {}
        self._program: SimplexConeProgram | None = None
        self._dual_rows = np.zeros((0, 0))  # the program's rows but the bounds: reduced costs
        self._centre_column = np.zeros(0)  # those rows times the centre: the aggregate column
        # The program by variable, as a restricted program gathers it, the aggregate as variable n:
        # equality rows, the first cone row, then the cone rows after it (the QR's rows).
        self._by_variable = np.zeros((0, 0))
        self._memory = _Memory()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_workspaces"] = {}  # solver objects live in the process that uses them
        return state

    def prepare(self, program: SimplexConeProgram) -> None:
        """A new BO step: new data, and no guesses carried over from the previous step."""
        self._program = program
        self._dual_rows = np.vstack([program.a_eq, program.a_cone])  # every row but the bounds
        self._centre_column = self._dual_rows @ program.centre
        self._by_variable = np.vstack([self._dual_rows.T, self._centre_column])
        self._memory = _Memory()

    def _workspace(self, count: int) -> _RestrictedWorkspace:
        """The workspace for `count` variables (at most the largest size)."""
        size = _PADDED_SIZE[count]
        key = (size, self._program.a_eq.shape[0])  # type: ignore[union-attr]
        if key not in self._workspaces:
            self._workspaces[key] = _RestrictedWorkspace(size, key[1], self.equilibrate)
        return self._workspaces[key]

    def _initial_set(self, c: np.ndarray, key: Hashable, tol: float) -> set[int]:
        memory = self._memory
        chosen = {int(c.argmin())}
        if key in memory.support:
            chosen.update(memory.support[key].tolist())
        dual = memory.dual.get(key, memory.last_dual)
        if dual is not None:
            reduced = c + self._dual_rows.T @ dual
            lowest = int(reduced.argmin())
            if reduced[lowest] < -tol:
                chosen.add(lowest)
        return chosen

    def solve(self, c: np.ndarray, key: Hashable = 0) -> np.ndarray | None:
        """x* for the objective c (solver variable order), certified; None: solve the complete program.

        With the compiled restricted solver the rounds run compiled too (`mmd_ipm.certified_rounds`,
        the same solutions to the bit); with Clarabel they run here."""
        program = self._program
        assert program is not None, "prepare() first"
        tol = self.tolerance * max(1.0, float(np.abs(c).max()))
        if self.restricted_solver == "compiled":
            return self._solve_compiled_rounds(c, key, tol)
        return self._solve_in_python(c, key, tol)

    def _solve_compiled_rounds(self, c: np.ndarray, key: Hashable, tol: float) -> np.ndarray | None:
        from wdrbo_dist.acquisition import mmd_ipm  # numba: imported where this route runs

        program, memory = self._program, self._memory
        assert program is not None
        dual_guess = memory.dual.get(key, memory.last_dual)
        certified, solution, support, dual, programs = mmd_ipm.certified_rounds(
            c, float(c @ program.centre), memory.support.get(key, _NO_SUPPORT),
            _NO_DUAL if dual_guess is None else dual_guess, self._by_variable, self._dual_rows, program.centre,
            program.b_eq, program.b_cone, tol, MAX_ROUNDS, ADDED_PER_ROUND, WORKSPACE_SIZES[-1], SUPPORT_THRESHOLD,
        )
        self.programs += programs
        if not certified:
            return None
        memory.support[key] = support
        memory.dual[key] = dual
        memory.last_dual = dual
        return solution

    def _solve_in_python(self, c: np.ndarray, key: Hashable, tol: float) -> np.ndarray | None:
        program = self._program
        assert program is not None
        chosen = self._initial_set(c, key, tol)
        zero = program.a_eq.shape[0]
        costs = np.empty(c.shape[0] + 1)  # the aggregate's cost last
        costs[:-1] = c
        costs[-1] = float(c @ program.centre)
        b_tail = program.b_cone[None, 1:]
        for _ in range(MAX_ROUNDS):
            if len(chosen) > WORKSPACE_SIZES[-1]:
                return None
            extended = np.fromiter(sorted(chosen) + [c.shape[0]], dtype=np.int64, count=len(chosen) + 1)
            working = extended[:-1]
            columns = self._by_variable[extended]  # [k + 1, zero + cone rows]
            # [k + 2, cone rows - 1]: the QR's columns and b, transposed (Fortran order for LAPACK)
            q, r = thin_qr(np.concatenate((columns[:, zero + 1 :], b_tail)).T)
            self.programs += 1
            solved = self._solve_restricted(columns, r, costs[extended])
            if solved is None:
                return None
            x, z_eq, z_cone = solved
            dual = np.concatenate([z_eq, z_cone[:1], q @ z_cone[1:]])
            reduced = c + self._dual_rows.T @ dual
            reduced[working] = np.inf
            violators = (reduced < -tol).nonzero()[0]
            if violators.size == 0:
                solution = x[-1] * program.centre
                solution[working] += x[:-1]
                self._memory.support[key] = working[x[:-1] > SUPPORT_THRESHOLD]
                self._memory.dual[key] = dual
                self._memory.last_dual = dual
                return solution
            chosen.update(violators[np.argsort(reduced[violators])][:ADDED_PER_ROUND].tolist())
        return None

    def _solve_restricted(
        self, columns: np.ndarray, r: np.ndarray, cost: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(x [k + 1], equality duals, cone duals in the compressed rows) of one restricted program
        (columns [k + 1, rows]: the variables' equality and first cone rows, R: the QR's rows with
        b last), or None where the solver reports no solution."""
        program = self._program
        assert program is not None
        zero, k1 = program.a_eq.shape[0], cost.shape[0]
        if self.restricted_solver == "clarabel":
            workspace = self._workspace(k1 - 1)
            status, x, z = workspace.solve(
                columns[:, :zero], program.b_eq, columns[:, zero], float(program.b_cone[0]), r, cost
            )
            if status != "Solved":
                return None
            n = workspace.size + 1
            return x, z[:zero], z[zero + n : zero + n + 1 + r.shape[0]]
        from wdrbo_dist.acquisition import mmd_ipm  # numba: imported where this route runs

        g = np.empty((1 + r.shape[0], k1))  # the cone's rows: its head, then R's
        g[0] = columns[:, zero]
        g[1:] = r[:, :k1]
        h = np.empty(1 + r.shape[0])
        h[0] = program.b_cone[0]
        h[1:] = r[:, k1]
        status, x, y, z, _ = mmd_ipm.solve_restricted(
            np.ascontiguousarray(cost), np.ascontiguousarray(columns[:, :zero].T), program.b_eq, g, h
        )
        return (x, y, z) if status == mmd_ipm.SOLVED else None

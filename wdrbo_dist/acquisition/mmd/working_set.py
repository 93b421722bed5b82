"""A certified working-set solve of DRBO-MMD's compiled conic program.

Why: the worst case p* of the MMD ball puts its mass on a few grid points (median 1-6 of 100
on Ackley and Branin), yet a solve of the complete program factors a KKT system with every grid
point, about 25,000 times per run. Here each candidate solves the program restricted to a small
working set S of its variables (mmd_ipm.py) and keeps the answer only when it is certified
optimal for the complete program; the comment above `SimplexConeProgram` gives the restricted
program, the certificate and the guesses of S.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FEASIBILITY_TOLERANCE = 1e-8  # Clarabel's default tol_feas, the scale of the certificate
MAX_WORKING_SET = 32  # variables of a restricted program, at most (more: the complete program)
MAX_ROUNDS = 12
ADDED_PER_ROUND = 3  # violators that join S per round (more makes every solve slower)
SUPPORT_THRESHOLD = 1e-7  # p_j above this carries over to the next candidate's working set
_NO_SUPPORT, _NO_DUAL = np.zeros(0, dtype=np.int64), np.zeros(0)


# Why: the worst case p* of the MMD ball puts its mass on a few grid points (median 1-6 of 100
# on Ackley and Branin), yet a solve of the complete program factors a KKT system with every grid
# point and every row of the Gram factor, about 25,000 times per run. Here each candidate solves
# the same compiled program restricted to a small working set S of its variables, and keeps the
# answer only when the restricted solution is certified optimal for the complete program. The
# restricted programs are solved by the dense interior-point method of mmd_ipm.py, and the
# rounds below run compiled there too (`mmd_ipm.certified_rounds`).
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
# solved again; after MAX_ROUNDS rounds, or when S outgrows MAX_WORKING_SET variables, the
# caller solves the complete program.
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


@dataclass
class _Memory:
    """What the previous solves of a BO step leave for the next candidates' guesses."""

    support: dict[Hashable, np.ndarray] = field(default_factory=dict)
    dual: dict[Hashable, np.ndarray] = field(default_factory=dict)
    last_dual: np.ndarray | None = None


class WorkingSetSolver:
    """Solves a `SimplexConeProgram` per objective vector c, or says it could not (None)."""

    def __init__(self, tolerance: float = FEASIBILITY_TOLERANCE) -> None:
        self.tolerance = tolerance
        self.programs = 0  # restricted conic programs solved (telemetry)
        self._program: SimplexConeProgram | None = None
        self._dual_rows = np.zeros((0, 0))  # the program's rows but the bounds: reduced costs
        # The program by variable, as a restricted program gathers it, the aggregate as variable n:
        # equality rows, the first cone row, then the cone rows after it (the QR's rows).
        self._by_variable = np.zeros((0, 0))
        self._memory = _Memory()

    def prepare(self, program: SimplexConeProgram) -> None:
        """A new BO step: new data, and no guesses carried over from the previous step."""
        self._program = program
        self._dual_rows = np.vstack([program.a_eq, program.a_cone])  # every row but the bounds
        centre_column = self._dual_rows @ program.centre  # the aggregate variable's column
        self._by_variable = np.vstack([self._dual_rows.T, centre_column])
        self._memory = _Memory()

    def solve(self, c: np.ndarray, key: Hashable = 0) -> np.ndarray | None:
        """x* for the objective c (solver variable order), certified; None: solve the complete program.

        The rounds run compiled (`mmd_ipm.certified_rounds`), the guesses of S from the previous
        solves of the same `key` (a batch row) or, failing that, of any."""
        from wdrbo_dist.acquisition.mmd import ipm as mmd_ipm  # numba: imported where it is first used

        program, memory = self._program, self._memory
        assert program is not None, "prepare() first"
        tol = self.tolerance * max(1.0, float(np.abs(c).max()))
        dual_guess = memory.dual.get(key, memory.last_dual)
        certified, solution, support, dual, programs = mmd_ipm.certified_rounds(
            c, float(c @ program.centre), memory.support.get(key, _NO_SUPPORT),
            _NO_DUAL if dual_guess is None else dual_guess, self._by_variable, self._dual_rows, program.centre,
            program.b_eq, program.b_cone, tol, MAX_ROUNDS, ADDED_PER_ROUND, MAX_WORKING_SET, SUPPORT_THRESHOLD,
        )
        self.programs += programs
        if not certified:
            return None
        memory.support[key] = support
        memory.dual[key] = dual
        memory.last_dual = dual
        return solution

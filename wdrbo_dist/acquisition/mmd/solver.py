"""DRBO-MMD's inner problem, min_p u^T p over the simplex within an MMD ball, as a conic program.

One parametrized CVXPY problem per run; per BO step the parameters are applied once and a
solver workspace (Clarabel or SCS) is set up, then each candidate changes only the objective
vector. With `working_set`, the program restricted to a few grid points is solved first (by
mmd_ipm.py's compiled method) and the answer kept only when its dual certifies it optimal
(mmd_working_set.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from wdrbo_dist.acquisition.mmd.working_set import SimplexConeProgram, WorkingSetSolver

SOLVERS = ("SCS", "CLARABEL")
PATHS = ("compiled", "cvxpy")
SCS_TOLERANCE = 1e-5  # CVXPY's default eps_abs / eps_rel for SCS


@dataclass(frozen=True)
class ConeDims:
    """The cone sizes of a conic program's rows: zero, nonnegative, then second-order cones."""

    zero: int
    nonneg: int
    soc: tuple[int, ...]


def drop_zero_cone_rows(a: Any, b: np.ndarray, dims: Any) -> tuple[Any, np.ndarray, ConeDims]:
    """The same program without the second-order-cone rows that are identically zero.

    A row with no nonzero in A and b = 0 pins its slack to 0, which adds nothing to ||s||: the
    rows of the zero columns of a low-rank factor F. Dropping them shrinks a 101-row cone to
    rank(F) + 1 rows (18 on Ackley), so each interior-point iteration factors a smaller KKT system.
    Only non-leading rows of a cone are dropped; the zero and nonnegative rows are kept.
    """
    import scipy.sparse as sp

    rows_csr = sp.csr_matrix(a)
    nonzero = (np.diff(rows_csr.indptr) > 0) | (b != 0)
    start = int(dims.zero) + int(dims.nonneg)
    keep = list(range(start))
    sizes = []
    for size in dims.soc:
        rows = [start] + [r for r in range(start + 1, start + int(size)) if nonzero[r]]
        keep += rows
        sizes.append(len(rows))
        start += int(size)
    keep_index = np.asarray(keep, dtype=np.int64)
    return sp.csc_matrix(rows_csr[keep_index]), b[keep_index], ConeDims(int(dims.zero), int(dims.nonneg), tuple(sizes))


class MMDWorstCase:
    """The inner SOCP of DRBO-MMD: one DPP problem per run, re-solved per candidate."""

    def __init__(
        self,
        size: int,
        solver: str = "SCS",
        path: str = "compiled",
        warm_start: bool = True,
        equilibrate: bool = True,
        working_set: bool = False,
    ) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"mmd_solver must be one of {SOLVERS}, got {solver!r}")
        if path not in PATHS:
            raise ValueError(f"mmd_solve_path must be one of {PATHS}, got {path!r}")
        self.size = size
        self.solver = solver
        self.path = path
        self.warm_start = warm_start
        self.equilibrate = equilibrate
        self.working_set = working_set and solver == "CLARABEL" and path == "compiled"
        self.complete_programs = 0  # complete programs solved (telemetry)
        self._cvx: dict[str, Any] | None = None  # CVXPY objects, built in the using process
        self._step: dict[str, Any] = {}
        self._working = WorkingSetSolver() if self.working_set else None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cvx"] = None
        state["_step"] = {}
        return state

    @property
    def programs(self) -> int:
        """Conic programs solved so far: complete ones and restricted (working-set) ones."""
        return self.complete_programs + (self._working.programs if self._working is not None else 0)

    # --- building -------------------------------------------------------------------------------
    def _build(self) -> dict[str, Any]:
        import cvxpy as cp

        size = self.size
        p = cp.Variable(size, nonneg=True)
        u = cp.Parameter(size)
        factor = cp.Parameter((size, size))
        centre = cp.Parameter(size)  # F^T w (a product of two parameters is not DPP)
        radius = cp.Parameter(nonneg=True)
        problem = cp.Problem(cp.Minimize(u @ p), [cp.sum(p) == 1, cp.SOC(radius, factor.T @ p - centre)])
        assert problem.is_dpp()
        cvx = {"problem": problem, "p": p, "u": u, "factor": factor, "centre": centre, "radius": radius}
        # Where u lands in the solver's objective vector: c = embed(u) (u @ p is linear in u).
        factor.value, centre.value, radius.value = np.eye(size), np.zeros(size), 1.0
        u.value = np.arange(1.0, size + 1.0)
        data, _, _ = problem.get_problem_data(self._cvx_solver(cp))
        c = np.asarray(data["c"], dtype=np.float64)
        index = np.full(size, -1)
        for position in np.flatnonzero(c):
            value = c[position]
            k = int(round(value)) - 1
            if 0 <= k < size and value == k + 1.0:
                index[k] = position
        cvx["embedding"] = index if (index >= 0).all() and np.count_nonzero(c) == size else None
        cvx["n_var"] = c.shape[0]
        return cvx

    def _cvx_solver(self, cp: Any) -> str:
        return cp.SCS if self.solver == "SCS" else cp.CLARABEL

    @property
    def cvx(self) -> dict[str, Any]:
        if self._cvx is None:
            self._cvx = self._build()
        return self._cvx

    # --- one BO step ------------------------------------------------------------------------------
    def prepare(self, factor: np.ndarray, centre: np.ndarray, radius: float) -> None:
        """Set the step's parameters (F, w, r); the compiled path also sets up the solver once."""
        import cvxpy as cp

        cvx = self.cvx
        cvx["factor"].value = factor
        cvx["centre"].value = factor.T @ centre
        cvx["radius"].value = float(radius)
        cvx["u"].value = np.zeros(self.size)
        self._step = {"centre": centre, "warm": {}}
        if self.path != "compiled" or cvx["embedding"] is None:
            return
        data, _, _ = cvx["problem"].get_problem_data(self._cvx_solver(cp))
        a = data["A"].tocsc()
        a.eliminate_zeros()  # the padded zero columns of F: same matrix, smaller workspace
        b = np.asarray(data["b"], dtype=np.float64)
        a, b, dims = drop_zero_cone_rows(a, b, data["dims"])
        c0 = np.zeros(cvx["n_var"])
        if self.solver == "SCS":
            import scs

            workspace = scs.SCS(
                {"A": a, "b": b, "c": c0},
                {"z": dims.zero, "l": dims.nonneg, "q": list(dims.soc)},
                eps_abs=SCS_TOLERANCE,
                eps_rel=SCS_TOLERANCE,
                normalize=self.equilibrate,
                verbose=False,
            )
        else:
            import clarabel
            import scipy.sparse as sp

            settings = clarabel.DefaultSettings()
            settings.verbose = False
            settings.presolve_enable = False  # keeps per-candidate data updates allowed
            settings.equilibrate_enable = self.equilibrate
            n_var = cvx["n_var"]
            cones = [clarabel.ZeroConeT(dims.zero), clarabel.NonnegativeConeT(dims.nonneg)]
            cones += [clarabel.SecondOrderConeT(q) for q in dims.soc]
            workspace = clarabel.DefaultSolver(sp.csc_matrix((n_var, n_var)), c0, a, b, cones, settings)
            if self._working is not None:
                centre_x = np.zeros(n_var)
                centre_x[cvx["embedding"]] = centre
                program = SimplexConeProgram.from_compiled(a, b, dims, centre_x)
                self._step["working_set"] = program is not None
                if program is not None:
                    self._working.prepare(program)
        self._step["workspace"] = workspace

    def solve(self, u: np.ndarray, slot: Hashable = 0) -> tuple[np.ndarray | None, str]:
        """(p*, status) for the UCB vector u on the grid; p* is None when there is no solution.

        `slot` names the candidate's batch row: the SCS warm start and the working set's guesses
        come from the previous solve of the same slot.
        """
        try:
            if "workspace" in self._step:
                return self._solve_compiled(u, slot)
            return self._solve_cvxpy(u)
        except Exception as exc:  # a solver error is a failed solve; the caller falls back
            return None, f"error: {type(exc).__name__}"

    def _solve_cvxpy(self, u: np.ndarray) -> tuple[np.ndarray | None, str]:
        import cvxpy as cp

        cvx = self.cvx
        cvx["u"].value = np.asarray(u, dtype=np.float64)
        options = {"eps_abs": SCS_TOLERANCE, "eps_rel": SCS_TOLERANCE} if self.solver == "SCS" else {}
        cvx["problem"].solve(solver=self._cvx_solver(cp), warm_start=self.warm_start, **options)
        self.complete_programs += 1
        p = cvx["p"].value
        return (None if p is None else np.array(p, dtype=np.float64)), str(cvx["problem"].status)

    def _solve_compiled(self, u: np.ndarray, slot: Hashable) -> tuple[np.ndarray | None, str]:
        cvx = self.cvx
        index = cvx["embedding"]
        c = np.zeros(cvx["n_var"])
        c[index] = u
        workspace = self._step["workspace"]
        if self._working is not None and self._step.get("working_set"):
            x = self._working.solve(c, slot)
            if x is not None:
                return x[index], "optimal"
        self.complete_programs += 1
        if self.solver == "SCS":
            workspace.update(c=c)
            warm = self._step["warm"].get(slot) if self.warm_start else None
            if warm is not None:
                result = workspace.solve(warm_start=True, x=warm[0], y=warm[1], s=warm[2])
            else:
                result = workspace.solve(warm_start=False)
            info = result["info"]
            status = {1: "optimal", 2: "optimal_inaccurate"}.get(int(info["status_val"]), str(info["status"]))
            if status in ("optimal", "optimal_inaccurate"):
                self._step["warm"][slot] = (result["x"], result["y"], result["s"])
                return np.array(result["x"][index]), status
            return None, status
        workspace.update(q=c)
        result = workspace.solve()
        status = str(result.status)
        mapped = {"Solved": "optimal", "AlmostSolved": "optimal_inaccurate"}.get(status, status)
        if mapped in ("optimal", "optimal_inaccurate"):
            return np.array(result.x)[index], mapped
        return None, mapped

"""Do DRBO-MMD's inner-solve routes give the same study results, and at what cost?

The worst case of the MMD ball has one value but, with a low-rank Gram factor, an
ill-conditioned minimiser p*: two solvers that agree on p*^T u to 1e-8 can return quite
different p*, so the envelope gradient p*^T grad u, and with it the whole BO trajectory,
differs after a few BO steps (on Ackley, seed 100: from the third or fourth, between any two
routes). So the routes are compared over seeds, paired (`paired_variants.py` says how).

Routes (every one solves the problem built once per run through CVXPY):
    compiled      certified restricted programs, solved by mmd_ipm.py (the paper profile's default)
    working-set   certified restricted programs, solved by Clarabel (the reference profile's)
    clarabel      the complete compiled program with Clarabel
    scs           the complete compiled program with SCS at eps 1e-5 (the published solver)

    .venv/bin/python benchmarks/mmd_routes.py                          # Ackley, 6 seeds, 2 workers (~6 min)
    .venv/bin/python benchmarks/mmd_routes.py --routes compiled working-set --seeds 10
    .venv/bin/python benchmarks/mmd_routes.py --seeds 10 --problems ackley newsvendor
    .venv/bin/python benchmarks/mmd_routes.py --fidelity reference

A sanity check that no route changes the method, not a proof.
"""

from __future__ import annotations

import argparse

from paired_variants import add_run_arguments, compare

ROUTES: dict[str, dict[str, object]] = {
    "compiled": {
        "mmd_solver": "CLARABEL", "mmd_equilibrate": False, "mmd_working_set": True, "mmd_restricted_solver": "compiled",
    },
    "working-set": {
        "mmd_solver": "CLARABEL", "mmd_equilibrate": False, "mmd_working_set": True, "mmd_restricted_solver": "clarabel",
    },
    "clarabel": {"mmd_solver": "CLARABEL", "mmd_equilibrate": False, "mmd_working_set": False},
    "scs": {"mmd_solver": "SCS", "mmd_equilibrate": True, "mmd_working_set": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, problems=["ackley"], seeds=6)
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    parser.add_argument("--fidelity", default="paper", choices=["paper", "reference"])
    args = parser.parse_args()
    compare(["drbo-mmd"], args.problems, {route: ROUTES[route] for route in args.routes}, args.seeds,
            args.evaluations, args.fidelity, args.workers, first_seed=args.first_seed)


if __name__ == "__main__":
    main()

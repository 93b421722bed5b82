"""The GP's two routes for context sets (option `context_basis`, models/gp.py): a numerical
basis of the context vectors (the default since version 0.6.0; for contexts drawn afresh in a
known box, one basis of the box's vectors) or the n(n+1)/2 pair products and an [n, n] form
per fresh candidate (version 0.5.0's records). Same method? At what speed?

The two routes agree to ~1e-11 (tests/models/test_gp.py: the basis route is nearer a direct
Cholesky solve), but that is enough for one seed's trajectories to part after a few BO steps,
so the routes are compared over seeds, paired (`paired_variants.py`).

    .venv/bin/python benchmarks/context_basis.py                       # ERBO, WDRBO, SBO-KDE on Ackley, 6 seeds
    .venv/bin/python benchmarks/context_basis.py --algorithms sbo-kde stableopt --problems ackley newsvendor --seeds 10
"""

from __future__ import annotations

import argparse

from paired_variants import add_run_arguments, compare

ROUTES: dict[str, dict[str, object]] = {"pairs": {"context_basis": False}, "basis": {"context_basis": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, problems=["ackley"], seeds=6, algorithms=["erbo", "wdrbo", "sbo-kde"])
    parser.add_argument("--fidelity", default="paper", choices=["paper", "reference"])
    args = parser.parse_args()
    compare(args.algorithms, args.problems, ROUTES, args.seeds, args.evaluations, args.fidelity, args.workers,
            first_seed=args.first_seed)


if __name__ == "__main__":
    main()

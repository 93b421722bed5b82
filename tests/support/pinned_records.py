"""Short runs of every algorithm in both profiles, whose records `test_pinned_records.py` pins.

A refactoring must leave them identical, bit for bit, outside the time columns. A change
that is meant to change them is a fidelity change: bump the version, show over seeds what it
changed, then write the file again with

    .venv/bin/python tests/pinned_records.py --write
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wdrbo_dist.portable import set_portable_environment

set_portable_environment()  # before NumPy is imported, as in the test process (`--write` otherwise pins this CPU's digits)
import pandas as pd  # noqa: E402

PINNED = Path(__file__).parent / "data" / "pinned_records.parquet"
PROBLEM = "three-hump-camel"  # 2-D decision, 1-D context: every algorithm's code paths, cheaply
SEED, EVALUATIONS, INIT_SIZE = 7, 8, 5
FAST = {"raw_samples": 64, "num_restarts": 2}
# Longer runs where the GP's basis route (option context_basis) is taken: below ~15 points the
# context vectors have full rank and every algorithm keeps the pairs.
LONGER_EVALUATIONS = 25
LONGER = ("wdrbo", "sbo-kde", "drbo-kde", "stableopt")
# Runs on two context dimensions that reach FORMS_MIN_POINTS, where the paper profile's Adam
# steps take the GP's quadratic forms (option context_forms) for fixed and for fresh contexts,
# and for WDRBO's context gradients (since 0.9.0).
FORMS_PROBLEM, FORMS_EVALUATIONS = "modified-branin", 50
FORMS = ("sbo-kde", "drbo-kde", "wdrbo")


def pinned_runs() -> pd.DataFrame:
    """The records of every algorithm x profile (and the longer runs), without the time columns, one thread."""
    import torch

    from wdrbo_dist.algorithms import ALGORITHMS
    from wdrbo_dist.problems import FIDELITIES
    from wdrbo_dist.records import deterministic_part
    from wdrbo_dist.run import RunSpec, run_one

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    frames = []
    try:
        cases = [(fidelity, algorithm, EVALUATIONS, PROBLEM) for fidelity in FIDELITIES for algorithm in ALGORITHMS]
        cases += [("paper", algorithm, LONGER_EVALUATIONS, PROBLEM) for algorithm in LONGER]
        cases += [("paper", algorithm, FORMS_EVALUATIONS, FORMS_PROBLEM) for algorithm in FORMS]
        for fidelity, algorithm, evaluations, problem in cases:
            spec = RunSpec(algorithm=algorithm, problem=problem, seed=SEED, evaluations=evaluations,
                           init_size=INIT_SIZE, fidelity=fidelity, options=tuple(sorted(FAST.items())))
            result = run_one(spec)
            assert result.ok, result.error
            records = deterministic_part(result.records)
            frames.append(records.assign(algorithm=algorithm, fidelity=fidelity, evaluations=evaluations,
                                         problem=problem))
    finally:
        torch.set_num_threads(before)
    return pd.concat(frames, ignore_index=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {PINNED.name} from this code")
    if parser.parse_args().write:
        PINNED.parent.mkdir(exist_ok=True)
        pinned_runs().to_parquet(PINNED, index=False)
        print(f"wrote {PINNED}")

"""The published side of `fidelity_paired.py`; it runs in the published code's venv.

Runs the published optimiser class (its `run_opt`, unmodified) on a published problem with the
initial design and the context draws it is given, instead of its own: `generate_initial_data`
returns the given design (observed through the problem as usual) and the problem's only random
draw hands out the given contexts in order: SciPy's `burr12.rvs` on Newsvendor, `torch.normal`
inside the problem's `evaluate_true` on the others (the given contexts are already clamped to
the box, and the problem's clamp leaves them so). Everything else (the GP fit, its retries,
BoTorch's optimiser) draws from the published code's own seeded streams, as `main.py` seeds
them. Writes a JSON answer (X, Y, contexts, stochastic_Y). Imports nothing of wdrbo_dist (not
installed here).

    PUBLISHED/venv/bin/python benchmarks/fidelity/fidelity_paired_probe.py PUBLISHED request.json answer.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("published", help="the published code's checkout")
    parser.add_argument("request", help="the JSON request fidelity_paired.py writes")
    parser.add_argument("answer", help="where the JSON answer goes")
    args = parser.parse_args()
    sys.path.insert(0, args.published)
    import botorch
    import numpy as np
    import torch

    import wdrbo.optimizers as optimizers
    from Benchmark import Test_Function

    request = json.loads(open(args.request).read())
    torch.set_num_threads(1)
    contexts = iter(request["contexts"])
    problem = getattr(Test_Function, request["problem"])(negate=True).to(dtype=torch.float64)  # as main.py makes it

    class GivenDemands:
        """Stands in for scipy.stats.burr12 in Newsvendor's module: the given draws, in order."""

        @staticmethod
        def rvs(c: float, d: float, size: int) -> np.ndarray:
            return np.array([next(contexts) for _ in range(size)], dtype=np.float64)

    def given_normal(mean: float, std: float, size: tuple[int, int]) -> torch.Tensor:
        """Stands in for torch.normal while the problem draws its contexts: the given rows, in order."""
        rows = [next(contexts) for _ in range(size[0])]
        return torch.tensor(rows, dtype=torch.float64).reshape(size)

    if request["problem"] == "Continuous_Vendor":
        Test_Function.burr12 = GivenDemands
    else:
        draw_contexts = problem.evaluate_true

        def evaluate_true(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: N803 - BoTorch's name
            normal, torch.normal = torch.normal, given_normal
            try:
                return draw_contexts(X)
            finally:
                torch.normal = normal

        problem.evaluate_true = evaluate_true
    design = torch.tensor(request["design"], dtype=torch.float64)

    def given_design(problem, init_size):  # noqa: ANN001 - the published function's signature
        y, contexts = problem(design)
        return design.clone(), y, contexts

    optimizers.generate_initial_data = given_design
    seed = int(request["seed"])
    botorch.manual_seed(seed)  # as main.py seeds a run
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    optimiser = getattr(optimizers, f"{request['optimizer']}_Optimizer")(
        problem, running_rounds=int(request["evaluations"]), init_size=len(request["design"]),
        device=torch.device("cpu"), beta=float(request["beta"]))
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # run_opt prints every step
        x, y, contexts, _, _, expected = optimiser.run_opt()
    with open(args.answer, "w") as handle:
        json.dump({"X": x.tolist(), "Y": y.reshape(-1).tolist(), "contexts": contexts.reshape(-1).tolist(),
                   "stochastic_Y": expected.reshape(-1).tolist()}, handle)


if __name__ == "__main__":
    main()

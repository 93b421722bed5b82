"""The published code's side of `fidelity_replay.py`; it runs in the published code's venv.

Reads a JSON request (a run's history, the steps to replay, a candidate set and the context
sets both codes share), and for each step t builds what the published optimiser builds at
that step from the first t observations (its `get_model`, called on an instance of its own
optimiser class; its acquisition class with the arguments its `run_opt` passes), evaluates
the acquisition on the candidates, and maximises it with BoTorch's `optimize_acqf` and the
optimiser's settings. Writes a JSON answer. Imports nothing of wdrbo_dist (not installed here).

    PUBLISHED/venv/bin/python benchmarks/fidelity/fidelity_probe.py PUBLISHED request.json answer.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("published", help="the published code's checkout")
    parser.add_argument("request", help="the JSON request fidelity_replay.py writes")
    parser.add_argument("answer", help="where the JSON answer goes")
    args = parser.parse_args()
    folder, request_path, answer_path = args.published, args.request, args.answer
    sys.path.insert(0, folder)
    import torch
    from botorch.acquisition.analytic import UpperConfidenceBound
    from botorch.generation.gen import gen_candidates_torch
    from botorch.optim.optimize import optimize_acqf

    import wdrbo.acquisition as acquisitions
    import wdrbo.optimizers as optimizers
    import wdrbo.utils as utils
    from Benchmark import Test_Function

    request = json.loads(open(request_path).read())
    torch.set_num_threads(1)
    dtype = torch.float64
    problem = getattr(Test_Function, request["problem"])(negate=True).to(dtype=dtype)
    d_c = problem.contexts_dim
    d_x = problem.dim - d_c
    ctx_bounds = problem.bounds[:, d_x:]
    history = {k: torch.tensor(request["history"][k], dtype=dtype) for k in ("X", "Y", "contexts")}
    candidates = torch.tensor(request["candidates"], dtype=dtype)
    name, beta = request["algorithm"], float(request["beta"])
    optimiser_class = getattr(optimizers, f"{name}_Optimizer")
    cheap = name in ("MMD", "DRBOKDE")
    restarts, raw, batch = (5, 64, 64) if cheap else (10, 1024, 512)

    def grid(count: int):
        if d_c == 1:
            return torch.linspace(float(ctx_bounds[0, 0]), float(ctx_bounds[1, 0]), count).reshape(-1, 1)
        per_dim = math.ceil(count ** (1 / d_c))
        return torch.stack([torch.linspace(float(ctx_bounds[0, k]), float(ctx_bounds[1, k]), per_dim) for k in range(d_c)], -1)

    answers = []
    for t in request["steps"]:
        opt = optimiser_class.__new__(optimiser_class)  # the class's methods, without its initial design
        opt.problem, opt.device, opt.beta = problem, torch.device("cpu"), beta
        opt.train_X, opt.train_Y, opt.contexts = history["X"][:t], history["Y"][:t], history["contexts"][:t]
        uses_context = name != "UCB"
        start = time.perf_counter()
        try:
            model = opt.get_model(context=uses_context)
        except Exception as error:  # noqa: BLE001 - BoTorch raises when all 5 fit attempts fail
            answers.append({"step": t, "fit_error": repr(error)})
            continue
        fit_seconds = time.perf_counter() - start
        contexts = opt.contexts
        kde = torch.tensor(request["kde_samples"][str(t)], dtype=dtype) if request.get("kde_samples") else None
        if name == "UCB":
            acq = UpperConfidenceBound(model=model, beta=beta)
        elif name in ("WassersteinUCB", "EmpiricalUCB"):
            points = torch.tensor(request["lipschitz_points"], dtype=dtype)
            radius = 0.3 / math.sqrt(t) if name == "WassersteinUCB" else 0
            acq = acquisitions.Wasserstein_UCB(model=model, beta=beta, kde_samples=contexts,
                                               contexts_samples_for_L=points, radius=radius)
        elif name == "SBOKDE":
            acq = acquisitions.KDE_UCB(model=model, beta=beta, kde_samples=kde)
        elif name == "DRBOKDE":
            acq = acquisitions.KDE_DRBO_UCB(model=model, beta=beta, distance=1 / math.pow(t, 2 / (4 + d_c)),
                                            kde_samples=kde, context_bound=ctx_bounds)
        elif name == "Stable":
            acq = acquisitions.Stable_UCB(model=model, beta=beta, contexts_observed=contexts)
        else:  # MMD, MMD_Minimax_Approx
            points = grid(100 if name == "MMD" else 1024)
            cls = acquisitions.MMD_UCB if name == "MMD" else acquisitions.MMD_Minimax_Approx_UCB
            acq = cls(model=model, distribution=utils.update_edf(contexts, points), discretized_contexts=points,
                      kernel_matrix=utils.get_kernel_matrix(model, before_dim=d_x, contexts=points),
                      dist=1 / math.sqrt(t) * (2.0 + math.sqrt(2.0 * math.log(10))), beta=beta)
        with torch.no_grad():
            values = torch.cat([acq(chunk.unsqueeze(1)) for chunk in candidates.split(batch)])
        start = time.perf_counter()
        chosen = []
        for repeat in range(int(request.get("repeats", 1))):
            torch.manual_seed(int(request["seed"]) + t + 1000 * repeat)
            point, _ = optimize_acqf(
                acq_function=acq, bounds=problem.bounds[:, :d_x], q=1, num_restarts=restarts, raw_samples=raw,
                gen_candidates=gen_candidates_torch, options={"batch_limit": batch},
            )
            chosen.append(point.detach().reshape(-1).tolist())
        covar = model.covar_module
        kernel = covar.base_kernel if hasattr(covar, "base_kernel") else covar
        answers.append({
            "step": t,
            "lengthscale": kernel.lengthscale.detach().reshape(-1).tolist(),
            "noise": float(model.likelihood.noise.detach().reshape(-1)[0]),
            "mean_constant": float(model.mean_module.constant.detach().reshape(-1)[0]),
            "values": values.detach().reshape(-1).tolist(),
            "chosen": chosen,
            "fit_seconds": fit_seconds,
            "acquisition_seconds": time.perf_counter() - start,
        })
    with open(answer_path, "w") as handle:
        json.dump(answers, handle)


if __name__ == "__main__":
    main()

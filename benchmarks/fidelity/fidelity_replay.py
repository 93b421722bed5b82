"""Replay a published run's history through both codes, step by step, to find where they differ.

For each replayed step t, both codes get the same first t observations of a published run
(its pickled X, Y and contexts) and the same shared random sets (WDRBO's Lipschitz points, the
KDE samples of SBO-KDE and DRBO-KDE, drawn here), and each builds its GP, its acquisition and
its choice. Printed per step:

    fit      max |log(l_ours / l_pub)| over the lengthscales, the two noise variances, and
             dobj = our MAP objective at our fit minus at the published fit (per point; < 0:
             ours found the better optimum of the same objective)
    acq      max |alpha_ours - alpha_pub| over 256 Sobol candidates, as a fraction of the
             published acquisition's range over them (StableOpt and DRBO-KDE redraw context
             sets at every call, so their acquisitions differ by that noise)
    choice   each code's optimiser is run --repeats times (other seeds): the median distance
             between the two codes' choices, and gap = (mean alpha(x_ours) - mean alpha(x_pub))
             / range, both under our acquisition (> 0: our optimiser climbed higher on the same
             function), with the standard error of that difference
    regret   the exact regret E* - E_c f(x, c) of those choices (what R_100 sums): the mean
             over each code's --repeats choices, ours / published

The published side runs `fidelity_probe.py` in the published code's venv; the history comes
from the published run in the ledger or the cache of `fidelity.py` (run that first for the
algorithm, problem and seed), or with `--history ours` from our `reference` run of the same
seed (run here): then both codes are asked what they would do next on our trajectory.

    .venv/bin/python benchmarks/fidelity/fidelity_replay.py --published /scratch/published \\
        --algorithm erbo --problem ackley --seed 200 --steps 5 10 20 40 70 99
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np
import torch

import wdrbo_dist.acquisition.drbo_kde as drbo_kde_module
import wdrbo_dist.acquisition.sbo_kde as sbo_kde_module
from benchmarks.fidelity.fidelity import FIRST_SEED
from benchmarks.fidelity.published import ALGORITHMS as PUBLISHED_NAMES, PROBLEMS as PUBLISHED_PROBLEMS, PublishedCode, PublishedRun
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.kde import kde_samples
from wdrbo_dist.acquisition.optimize import maximize_acquisition
from wdrbo_dist.acquisition.sobol import scrambled_sobol
from wdrbo_dist.acquisition.registry import make_algorithm
from wdrbo_dist.models.compiled_fit import CompiledMapObjective
from wdrbo_dist.models.fit import fit_gp, standardize
from wdrbo_dist.models.map_objective import lengthscale_prior
from wdrbo_dist.problems import make_problem
from wdrbo_dist.models.settings import NumericalSettings

CANDIDATES = 256


def shared_sets(algorithm: str, problem, contexts: torch.Tensor, steps: list[int], seed: int) -> dict:
    """The random sets both codes are handed: drawn here, once."""
    g = torch.Generator().manual_seed(seed)
    out: dict = {"lipschitz_points": None, "kde_samples": None}
    if algorithm in ("wdrbo", "erbo"):
        lo, hi = problem.context_bounds
        out["lipschitz_points"] = (lo + (hi - lo) * torch.rand(100, problem.dim_c, generator=g, dtype=torch.float64)).tolist()
    if algorithm in ("sbo-kde", "drbo-kde"):
        count = 512 if algorithm == "sbo-kde" else 1024
        out["kde_samples"] = {
            str(t): kde_samples(contexts[:t], count, problem.context_bounds, g).tolist() for t in steps
        }
    return out


def ask_published(code: PublishedCode, request: dict) -> list[dict]:
    probe = Path(__file__).resolve().parent / "fidelity_probe.py"
    with tempfile.TemporaryDirectory() as folder:
        req, ans = Path(folder) / "request.json", Path(folder) / "answer.json"
        req.write_text(json.dumps(request))
        subprocess.run([str(code.python), str(probe), str(code.folder), str(req), str(ans)], check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(ans.read_text())


def published_history(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, c, y) of the published run of this cell and seed, from the ledger or the cache."""
    cache = Path(args.cache) / "published"
    run = PublishedRun(args.algorithm, args.problem, args.seed)
    if not run.done(cache):
        raise SystemExit(f"no published run of {args.algorithm} on {args.problem} seed {args.seed} in {cache}: "
                         "run benchmarks/fidelity/fidelity.py for that cell first")
    data = run.load(cache)
    x = torch.as_tensor(np.asarray(data["X"]), dtype=torch.float64)
    c = torch.as_tensor(np.asarray(data["contexts"]), dtype=torch.float64).reshape(x.shape[0], -1)
    y = torch.as_tensor(np.asarray(data["Y"]), dtype=torch.float64).reshape(-1)
    return x, c, y


def our_history(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, c, y) of our `reference` run of this cell and seed, run here (the fidelity protocol)."""
    from benchmarks.fidelity.fidelity import our_spec
    from wdrbo_dist.run.records import c_columns, x_columns
    from wdrbo_dist.run.loop import run_one

    problem = make_problem(args.problem, "reference")
    result = run_one(our_spec(args.algorithm, args.problem, args.seed))
    assert result.ok, result.error
    records = result.records
    x = torch.tensor(records[x_columns(problem.dim_x)].to_numpy(), dtype=torch.float64)
    c = torch.tensor(records[c_columns(problem.dim_c)].to_numpy(), dtype=torch.float64)
    return x, c, torch.tensor(records["y"].to_numpy(), dtype=torch.float64)


def replay(args: argparse.Namespace) -> None:
    code = PublishedCode.at(args.published, args.published_python)
    x, c, y = (our_history if args.history == "ours" else published_history)(args)
    options = dict(args.option)  # our side only: a variant to compare
    problem = make_problem(args.problem, "reference")
    steps = [t for t in args.steps if 2 <= t <= x.shape[0]]
    candidates = scrambled_sobol(CANDIDATES, problem.dim_x, torch.Generator().manual_seed(7))
    sets = shared_sets(args.algorithm, problem, c, steps, args.seed)
    request = {
        "problem": PUBLISHED_PROBLEMS[args.problem], "algorithm": PUBLISHED_NAMES[args.algorithm], "beta": 1.5,
        "history": {"X": x.tolist(), "Y": y.tolist(), "contexts": c.tolist()}, "steps": steps,
        "candidates": candidates.tolist(), "seed": args.seed, "repeats": args.repeats, **sets,
    }
    theirs = {a["step"]: a for a in ask_published(code, request)}

    print(f"{args.algorithm} on {args.problem}, {args.history} seed {args.seed}: replayed steps {steps}")
    print(f"{'t':>3} | {'fit: dlog l':>11} {'noise ours/pub':>19} {'dobj':>9} | {'acq diff':>9} | "
          f"{'|dx|':>7} {'gap +- SE':>19} | {'regret ours / pub':>19}")
    unit = torch.stack([torch.zeros(problem.dim_x), torch.ones(problem.dim_x)]).to(torch.float64)
    lower, upper = problem.decision_bounds[0], problem.decision_bounds[1]
    _, optimal_value = problem.optimum()

    def regret(x_unit: torch.Tensor) -> float:
        """Mean exact regret of unit-box choices [k, d_x] (as `run_one` scores a choice)."""
        return float((optimal_value - problem.expected_value(lower + (upper - lower) * x_unit)).mean())

    for t in steps:
        answer = theirs[t]
        if "fit_error" in answer:
            print(f"{t:>3} | published GP fit raised: {answer['fit_error']}")
            continue
        algo = make_algorithm(args.algorithm, problem, "reference", options)
        inputs = torch.cat([x[:t], c[:t]], -1) if algo.uses_context else x[:t]
        state = BOState(x[:t], c[:t], y[:t])
        g = torch.Generator().manual_seed(args.seed + t)
        model, _ = fit_gp(inputs, y[:t], g, NumericalSettings.for_run("cpu"))  # our run's routes
        y_std, _, _ = standardize(y[:t])
        objective = CompiledMapObjective(inputs.numpy(), y_std.numpy(), lengthscale_prior(inputs.shape[1]))
        ours_theta = np.concatenate([model.lengthscale.numpy(), [model.noise, model.mean_constant]])
        their_theta = np.concatenate([answer["lengthscale"], [answer["noise"], answer["mean_constant"]]])
        d_obj = objective(ours_theta)[0] - objective(their_theta)[0]
        d_log_l = float(np.max(np.abs(np.log(ours_theta[:-2] / their_theta[:-2]))))

        algo.setup(state, g)
        if sets["lipschitz_points"] is not None and args.algorithm == "wdrbo":
            lo, hi = problem.context_bounds
            algo._uniform = (torch.tensor(sets["lipschitz_points"], dtype=torch.float64) - lo) / (hi - lo)
        if sets["kde_samples"] is not None:
            fixed = torch.tensor(sets["kde_samples"][str(t)], dtype=torch.float64)
            sbo_kde_module.kde_samples = drbo_kde_module.kde_samples = lambda *_, _f=fixed: _f
        acq = algo.acquisition(model, state, g)
        with torch.no_grad():
            ours_values = torch.cat([acq(chunk) for chunk in candidates.split(64)])
        their_values = torch.tensor(answer["values"], dtype=torch.float64)
        span = float(their_values.max() - their_values.min()) or 1.0
        acq_diff = float((ours_values - their_values).abs().max()) / span
        x_ours = torch.stack([
            maximize_acquisition(acq, unit, algo.optimizer_settings(), torch.Generator().manual_seed(args.seed + t + 1000 * k))[0]
            for k in range(args.repeats)
        ])
        x_pub = torch.tensor(answer["chosen"], dtype=torch.float64)
        with torch.no_grad():
            v_ours, v_pub = acq(x_ours) / span, acq(x_pub) / span
        gap = float(v_ours.mean() - v_pub.mean())
        se = float((v_ours.var() / len(v_ours) + v_pub.var() / len(v_pub)).sqrt()) if args.repeats > 1 else float("nan")
        distance = float(torch.cdist(x_ours, x_pub).diagonal().median())
        print(f"{t:>3} | {d_log_l:>11.2e} {model.noise:>9.2e}/{answer['noise']:<9.2e} {d_obj:>9.2e} | "
              f"{acq_diff:>9.2e} | {distance:>7.4f} {gap:>+9.2e} +- {se:.1e} | "
              f"{regret(x_ours):>9.4g} / {regret(x_pub):<9.4g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_published_arguments(parser, required=True)
    parser.add_argument("--algorithm", required=True, choices=list(PUBLISHED_NAMES))
    parser.add_argument("--problem", required=True, choices=list(PUBLISHED_PROBLEMS))
    parser.add_argument("--seed", type=int, default=FIRST_SEED)
    parser.add_argument("--steps", type=int, nargs="+", default=[5, 10, 20, 40, 70, 99])
    harness.add_option(parser, help="an option of our algorithm for our side (e.g. mmd_solver=SCS)")
    parser.add_argument("--history", choices=["published", "ours"], default="published",
                        help="whose run's observations both codes are given (ours: our reference run, run here)")
    parser.add_argument("--repeats", type=int, default=8, help="optimiser runs per step and code")
    args = parser.parse_args()
    try:
        PublishedCode.at(args.published, args.published_python)
        make_algorithm(args.algorithm, make_problem(args.problem, "reference"), "reference", dict(args.option))
    except ValueError as error:
        parser.error(str(error))  # one line, exit 2, before any work
    replay(args)


if __name__ == "__main__":
    main()

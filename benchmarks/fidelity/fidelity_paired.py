"""Both codes on the same draws of the environment: runs paired by common random numbers.

`fidelity.py` compares the two codes over seeds, unpaired: each code draws its own initial
design and its own contexts, so a run stuck at a poor decision on one side has no partner on
the other and a few such runs decide a 40-seed mean. Here, for each seed, our `reference` run
is made first; then the published optimiser (`fidelity_paired_probe.py`, in its venv) is run on
the same two initial points and the same sequence of contexts (the t-th evaluation sees the
t-th context whatever x is chosen: no problem's context draw depends on x). What is left to
differ is each code's method and its own internal draws (the optimiser's Sobol screen and
restarts, the fit's retries), which the two codes make from different streams. So:

- where the two codes compute the same thing, their trajectories agree until an internal draw
  parts them, and a run that sticks at the box's bound on one side sticks on the other;
- the per-seed log-ratio of R_100 (ours / published) is decided by the paired TOST of
  `wdrbo_dist.analysis.equivalence` (one-sample t, margin [0.8, 1.25]): far more power than
  the unpaired cell, because the environment's luck is shared.

Printed per algorithm: R_100 mean ± SE of each code, the paired ratio with its 90 % interval and
verdict, how many runs keep their decisions within 0.01 at every evaluation, the median first evaluation where the
decisions part (further than 0.01 in any coordinate), and on Newsvendor the runs with 10 or more evaluations at
x = 0 on each side. Our runs are cached in CACHE/paired (a new package version runs them again);
the published side is kept in the committed `data/paired_published_runs.jsonl`, keyed by the
draws it was given (`--published` is needed only for pairs not there yet). Seeds 300 and up by
default (fidelity.py uses 200-249).

    .venv/bin/python benchmarks/fidelity/fidelity_paired.py --published /scratch/published --algorithms erbo gp-ucb --seeds 20
    .venv/bin/python benchmarks/fidelity/fidelity_paired.py --published /scratch/published --problem three-hump-camel --algorithms erbo --seeds 20
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np

from benchmarks.fidelity.fidelity import EVALUATIONS, decide, decision_cells, our_spec, ratio_text, summary
from benchmarks.fidelity.published import (
    ALGORITHMS as PUBLISHED_NAMES, PROBLEMS as PUBLISHED_PROBLEMS, THREAD_ENV, PublishedCode, append_to_ledger, read_ledger,
)
from wdrbo_dist.problems import make_problem
from wdrbo_dist.run.loop import run_one

PROBLEMS = ("newsvendor", "modified-branin", "three-hump-camel", "ackley")  # the probe's problems
FIRST_SEED = 300
BETA = 1.5
PARTED = 0.01  # decisions further apart than this have parted (the optimisers stop within ~1e-3)
STUCK = 10  # evaluations at x = 0 that make a Newsvendor run "stuck at the bound"
# The published side of every pair, committed (a published run costs minutes): keyed by algorithm,
# seed and the draws it was given, so a version of ours that draws differently runs it again.
LEDGER = Path(__file__).resolve().parent / "data" / "paired_published_runs.jsonl"


def draws_key(problem: str, algorithm: str, seed: int, mine: dict) -> str:
    digest = hashlib.sha256(json.dumps([mine["design"], mine["contexts"]]).encode()).hexdigest()[:16]
    return f"{algorithm}_{problem}_{seed}_{digest}"


def read_paired_ledger() -> dict[str, dict]:
    """The committed published answers by key (published.py's reader: a torn last line is skipped)."""
    return {key: entry["published"] for key, entry in read_ledger(LEDGER).items()}


def record(key: str, answer: dict) -> None:
    append_to_ledger({"key": key, "published": answer}, LEDGER)


def ours(problem: str, algorithm: str, seed: int) -> dict:
    """Our reference run: its decisions, expected values, initial design and context stream (one
    number an evaluation where the context is one-dimensional, else a row)."""
    spec = our_spec(algorithm, problem, seed)
    result = run_one(spec)
    if not result.ok:
        raise SystemExit(f"ours: {spec.label} failed:\n{result.error}")
    records = result.records
    x = records.filter(like="x_").to_numpy()
    c = records.filter(like="c_").to_numpy()
    return {"run_key": spec.run_key, "X": x.tolist(), "expected": records["expected_value"].tolist(),
            "design": x[records["is_initial"].to_numpy()].tolist(),
            "contexts": (c[:, 0] if c.shape[1] == 1 else c).tolist()}


def published(code: PublishedCode | None, problem: str, algorithm: str, seed: int, mine: dict) -> dict:
    """The published optimiser on our run's design and contexts (fidelity_paired_probe.py)."""
    if code is None:
        raise SystemExit(f"--published is needed: the pair {algorithm} on {problem} seed {seed} is not in {LEDGER.name}")
    request = {"optimizer": PUBLISHED_NAMES[algorithm], "problem": PUBLISHED_PROBLEMS[problem], "seed": seed,
               "evaluations": EVALUATIONS, "beta": BETA, "design": mine["design"], "contexts": mine["contexts"]}
    probe = Path(__file__).resolve().parent / "fidelity_paired_probe.py"
    with tempfile.TemporaryDirectory() as folder:
        request_path, answer_path = Path(folder) / "request.json", Path(folder) / "answer.json"
        request_path.write_text(json.dumps(request))
        done = subprocess.run([str(code.python), str(probe), str(code.folder), str(request_path), str(answer_path)],
                              capture_output=True, text=True, env={**os.environ, **THREAD_ENV})
        if done.returncode != 0:
            raise SystemExit(f"published {algorithm} on {problem} seed {seed} failed:\n{done.stderr[-2000:]}")
        return json.loads(answer_path.read_text())


def cache_path(cache: Path, problem: str, algorithm: str, seed: int) -> Path:
    return cache / f"{algorithm}_{problem}_{seed}.json"


def pair(code: PublishedCode | None, cache: Path, problem: str, algorithm: str, seed: int, mine: dict) -> dict:
    """Both runs of one seed: the published side from the ledger where it is there, else run here."""
    key = draws_key(problem, algorithm, seed, mine)
    answer = read_paired_ledger().get(key)
    path = cache_path(cache, problem, algorithm, seed)
    if answer is None:
        cached = json.loads(path.read_text()) if path.is_file() else None
        if cached is not None and draws_key(problem, algorithm, seed, cached["ours"]) == key:
            answer = cached["published"]
        else:
            answer = published(code, problem, algorithm, seed, mine)
            print(f"  {algorithm} on {problem} seed {seed}: done", flush=True)
        record(key, answer)
    entry = {"ours": mine, "published": answer}
    path.write_text(json.dumps(entry))
    return entry


def cached_ours(cache: Path, problem: str, algorithm: str, seed: int) -> dict:
    """Our run of one seed: the cached one if this version made it, else run here (in this process)."""
    path = cache_path(cache, problem, algorithm, seed)
    if path.is_file() and (entry := json.loads(path.read_text()))["ours"]["run_key"] == our_spec(algorithm, problem, seed).run_key:
        return entry["ours"]
    return ours(problem, algorithm, seed)


def row(problem: str, algorithm: str, entries: list[dict]) -> str:
    optimum = make_problem(problem, "reference").optimal_value
    ours_r, pub_r, same, parted_at, stuck = [], [], 0, [], [0, 0]
    for entry in entries:
        x_ours = np.asarray(entry["ours"]["X"], dtype=np.float64).reshape(EVALUATIONS, -1)
        x_pub = np.asarray(entry["published"]["X"], dtype=np.float64).reshape(EVALUATIONS, -1)
        ours_r.append(float(np.sum(optimum - np.asarray(entry["ours"]["expected"]))))
        pub_r.append(float(np.sum(optimum - np.asarray(entry["published"]["stochastic_Y"]))))
        parted = np.flatnonzero(np.max(np.abs(x_ours - x_pub), axis=1) > PARTED)
        if parted.size:
            parted_at.append(int(parted[0]) + 1)
        else:
            same += 1
        stuck[0] += int(np.sum(np.all(x_ours == 0.0, axis=1)) >= STUCK)
        stuck[1] += int(np.sum(np.all(x_pub == 0.0, axis=1)) >= STUCK)
    result = decide(ours_r, pub_r, f"{algorithm} on {problem} (paired)", paired=True)
    median_parted = f"{np.median(parted_at):.0f}" if parted_at else "-"
    stuck_cell = f"{stuck[0]} / {stuck[1]}" if problem == "newsvendor" else "-"
    return (f"| {algorithm} | {problem} | {len(entries)} | {summary(ours_r)} | {summary(pub_r)} | {ratio_text(result)} | "
            f"{decision_cells(result)} | {same} | {median_parted} | {stuck_cell} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_published_arguments(parser, help="the published code's checkout (unmodified, commit 75f891a); "
                                                  "needed only for pairs the ledger does not hold")
    parser.add_argument("--algorithms", nargs="+", default=["erbo", "gp-ucb"],
                        choices=["wdrbo", "erbo", "gp-ucb", "sbo-kde", "drbo-kde", "stableopt"])
    parser.add_argument("--problem", default="newsvendor", choices=PROBLEMS)
    harness.add_seeds(parser, 20, help=f"seeds {FIRST_SEED}, {FIRST_SEED + 1}, ...")
    parser.add_argument("--first-seed", type=int, default=FIRST_SEED)
    harness.add_workers(parser, help="seeds in parallel")
    args = parser.parse_args()
    try:
        code = PublishedCode.at(args.published, args.published_python) if args.published else None
    except ValueError as error:
        parser.error(str(error))  # one line, exit 2, before any work
    cache = Path(args.cache) / "paired"
    cache.mkdir(parents=True, exist_ok=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    lines = ["| algorithm | problem | pairs | ours R_100 | published R_100 | ratio [90% CI] | TOST p | verdict | seeds needed "
             "| runs within 0.01 throughout | median first parted evaluation | stuck at x = 0: ours / published |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for algorithm in args.algorithms:
        mine = {seed: cached_ours(cache, args.problem, algorithm, seed) for seed in seeds}  # ours first, one at a time
        with ThreadPoolExecutor(args.workers) as pool:  # the published runs as subprocesses side by side
            entries = list(pool.map(lambda s: pair(code, cache, args.problem, algorithm, s, mine[s]), seeds))
        lines.append(row(args.problem, algorithm, entries))
    print("\n".join(lines))
    print(f"\n{args.problem}, seeds {seeds[0]}..{seeds[-1]}: both codes on our run's initial design and context draws; "
          f"R_100: cumulative exact regret after {EVALUATIONS} evaluations, mean ± SE; ratio: ours / published, of "
          "geometric means, with the 90% interval of the one-sample t on the per-seed log-ratios (paired TOST, margin "
          f"[0.8, 1.25]); within: decisions within {PARTED:g} at every evaluation; stuck: runs with {STUCK} or more "
          "evaluations at x = 0 (Newsvendor).")


if __name__ == "__main__":
    main()

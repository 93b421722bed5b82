"""How near the arithmetic's floor a run is: the multiply-adds of its posterior kernels, counted
from their shapes, against the time they take and against one core's matrix-product rate.

Issue 15 asks, where a speed target is out of reach, for what bounds it, measured. After the
compiled routes almost all of a run is the posterior at (candidate, context) pairs: the compiled
pair and mean-UCB kernels of the Adam steps and the screening pass's pair products. Each call
of those functions is timed here and its multiply-adds counted from the shapes it is given
(`*_work` below: the products and the per-pair loops, not the exponentials), then set against
numpy's matrix product on one core at its best (the faster of a large square product and the
kernels' typical shape, a [512, 60] x [60, 600] product: on some machines the square one is the
slower). "floor" is the run's time with the counted
kernels at the best rate and everything else as measured: no implementation of the same
arithmetic runs below it. The records are the same as without the wrappers.

    .venv/bin/python benchmarks/speed/kernel_work.py                               # every algorithm, Ackley
    .venv/bin/python benchmarks/speed/kernel_work.py --problem portfolio-uniform --algorithms erbo stableopt
    .venv/bin/python benchmarks/speed/kernel_work.py --study     # every cell of the paper study, one seed (~17 min)

Columns: run (s, the run's steps), counted (s in the counted kernels, and their share of the
run), GMAC (10^9 multiply-adds counted), rate (GMAC/s they ran at), floor (s), floor/ERBO's floor.
With `--study`, the last line is the whole study on 2 workers (every cell's seeds as long as the
measured one, longest first, as `runner/study_estimate.py` schedules them) as run and at the floor: the
runs here go one at a time, so "as run" lacks the ~10 % two runs side by side cost each other.
The study file says what runs, so the per-run arguments (--algorithms, --problem, --seed,
--evaluations) are refused beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np

from benchmarks.runner.study_estimate import makespan
from wdrbo_dist.execution.allocator import keep_freed_memory
from wdrbo_dist.study.config import ConfigError, load_study_config
from wdrbo_dist.models import compiled_pairs, compiled_ucb, gp
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one

keep_freed_memory()  # as every worker does before its run (execution/task.py, `execute`)


def forms_work(b: int, n: int, r: int, identity: bool) -> int:
    """`ucb_kernels._candidate_forms`: S_b and B_b (elementwise for V = I)."""
    return 2 * b * n * n if identity else b * n * r + b * r * n * n + b * n * r * r


def _rank(n: int, basis: np.ndarray, identity: bool) -> int:
    return n if identity else basis.shape[1]


def pair_values_work(x, train, lengthscale, inverse, alpha, mean_constant, beta, basis, identity,  # type: ignore[no-untyped-def]
                     coefficients, vectors) -> int:
    b, (n_contexts, n) = x.shape[0], vectors.shape
    r = _rank(n, basis, identity)
    return forms_work(b, n, r, identity) + b * n * n_contexts + n_contexts * b * r * r + n_contexts * b * r


def pair_gradient_work(x, train, lengthscale, alpha, beta, basis, identity, coefficients, vectors,  # type: ignore[no-untyped-def]
                       kx, solved, inverse_sigma, weights) -> int:
    b, (n_contexts, n) = x.shape[0], vectors.shape
    r = _rank(n, basis, identity)
    return b * n_contexts * n + n_contexts * b * r * (r + 1) + (0 if identity else n * r * b * r) + b * n * r


def acquisition_terms_work(x, train, lengthscale, inverse, alpha, mean_constant, beta, basis, identity,  # type: ignore[no-untyped-def]
                           centre_coefficients, centre_weights, centre_mean, points, coefficients, derivatives) -> int:
    (b, dim_x), n = x.shape, train.shape[0]
    dim_c = train.shape[1] - dim_x
    r = _rank(n, basis, identity)
    n_centre, m_points = centre_coefficients.shape[0], points.shape[0]
    work = forms_work(b, n, r, identity) + 2 * n_centre * b * r * (r + 1) + (0 if identity else n * r * b * r)
    work += b * n * r + 2 * b * n
    if m_points:  # L(x): the norms at every point, then the gradient at each maximiser
        work += b * n * dim_c * m_points + m_points * b * r * r + m_points * b * r * (1 + dim_c)
        work += n * n * b * (1 + dim_x) + b * n * dim_c * (3 + dim_x)
    return work


def fresh_vectors_work(contexts, train, lengthscale, region, residual_max) -> int:  # type: ignore[no-untyped-def]
    n_contexts, n = contexts.shape[0], train.shape[0]
    return n_contexts * n * contexts.shape[1] + 2 * n_contexts * n * region.shape[1]


def fresh_pair_values_work(x, contexts, train, lengthscale, inverse, alpha, mean_constant, beta,  # type: ignore[no-untyped-def]
                           region, residual_max) -> int:
    """Assumes the projection holds where a region is given (else V = I: more work, undercounted)."""
    b, n_contexts, n = x.shape[0], contexts.shape[0], train.shape[0]
    identity = region.shape[1] == 0
    r = _rank(n, region, identity)
    return (fresh_vectors_work(contexts, train, lengthscale, region, residual_max)
            + forms_work(b, n, r, identity) + b * n * n_contexts + n_contexts * b * r * (r + 1))


def features_work(self, x, features, beta, detach_gradient=False) -> int:  # type: ignore[no-untyped-def]
    """`ucb_from_features`: the pair products with the features (and the basis forms)."""
    c, n = x.shape[0], self.n
    pairs, columns = features.quad.shape
    work = c * pairs * columns + c * n * columns
    if features.basis is not None:
        r = features.basis.shape[1]
        work += c * (n * r + n * n * r + n * r * r)
    return work


class Tally:
    """Seconds and multiply-adds of the counted kernels."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.work = 0
        self.by_function: dict[str, list[float]] = {}  # name: [seconds, multiply-adds]
        self.depth = 0  # a counted kernel called from a counted kernel counts once

    def counted(self, function: Callable, work: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            outer = self.depth == 0
            self.depth += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1
                if outer:
                    elapsed, done = time.perf_counter() - start, work(*args, **kwargs)
                    self.seconds += elapsed
                    self.work += done
                    entry = self.by_function.setdefault(function.__name__, [0.0, 0])
                    entry[0] += elapsed
                    entry[1] += done
        return wrapper


# (module, name, work): the functions whose calls are counted
COUNTED = (
    (compiled_pairs, "pair_values", pair_values_work),
    (compiled_pairs, "pair_gradient", pair_gradient_work),
    (compiled_ucb, "acquisition_terms", acquisition_terms_work),
    (compiled_pairs, "fresh_pair_values", fresh_pair_values_work),
    (compiled_pairs, "fresh_vectors", fresh_vectors_work),
    (gp.GaussianProcess, "ucb_from_features", features_work),
)


def measure(spec: RunSpec) -> tuple[float, Tally]:
    """(the run's step seconds, its tally)."""
    tally = Tally()
    saved = [getattr(owner, name) for owner, name, _ in COUNTED]
    for (owner, name, work), function in zip(COUNTED, saved):
        setattr(owner, name, tally.counted(function, work))
    try:
        result = run_one(spec, capture_errors=False)
    finally:
        for (owner, name, _), function in zip(COUNTED, saved):
            setattr(owner, name, function)
    steps = result.records[~result.records["is_initial"]]
    return float(steps["time_step_s"].sum()), tally


def product_rate(m: int, k: int, n: int, seconds: float = 0.5) -> float:
    """GMAC/s of numpy's [m, k] x [k, n] product on this thread (best of repeated timings)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return m * k * n / best / 1e9


def report_runs(specs: dict[str, RunSpec], best: float, detail: bool) -> dict[str, tuple[float, float]]:
    """Measure each run (ERBO first), print its row; {algorithm: (run s, floor s)}."""
    measured: dict[str, tuple[float, float]] = {}
    for name in sorted(specs, key=lambda name: name != "erbo"):
        # A short run first: imports and first-call compilation, paid once per worker process.
        run_one(replace(specs[name], evaluations=4, init_size=2), capture_errors=False)
        run_s, tally = measure(specs[name])
        gmac = tally.work / 1e9
        floor = run_s - tally.seconds + gmac / best
        measured[name] = (run_s, floor)
        relative = f"{floor / measured['erbo'][1]:.2f}" if "erbo" in measured else "-"
        rate = f"{gmac / tally.seconds:.1f}" if tally.seconds else "-"
        print(f"{name:<18}{run_s:>8.2f}{tally.seconds:>11.2f}{tally.seconds / run_s:>7.0%}{gmac:>8.2f}"
              f"{rate:>7}{floor:>9.2f}{relative:>12}", flush=True)
        if detail:
            for function, (seconds, work) in sorted(tally.by_function.items(), key=lambda item: -item[1][0]):
                print(f"    {function:<24}{seconds:>8.2f} s{work / 1e9:>8.2f} GMAC{work / 1e9 / seconds:>7.1f} GMAC/s")
    return measured


def study_cells(config: str) -> tuple[dict[str, dict[str, RunSpec]], int]:
    """The first seed's run of every cell of a study file, by problem, and the study's seeds."""
    try:
        study = load_study_config(config)
    except ConfigError as error:  # one line, exit 2, before any run
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    cells: dict[str, dict[str, RunSpec]] = {}
    for spec in study.runs:
        if spec.seed == study.seeds[0]:
            cells.setdefault(spec.problem, {})[spec.algorithm] = spec
    return cells, len(study.seeds)


DEFAULT_STUDY = harness.ROOT / "configs" / "paper_data_driven.yaml"
HEADER = f"{'algorithm':<18}{'run s':>8}{'counted s':>11}{'share':>7}{'GMAC':>8}{'rate':>7}{'floor s':>9}{'floor/ERBO':>12}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_run_arguments(parser)
    parser.add_argument("--detail", action="store_true", help="each counted function's seconds, GMAC and rate")
    parser.add_argument("--study", nargs="?", const=str(DEFAULT_STUDY), metavar="CONFIG",
                        help="one seed of every cell of a study file (default: the paper's data-driven study), "
                             "then the whole study's time on 2 workers, as run and at the floor")
    args = parser.parse_args()
    if args.study:
        run_arguments = argparse.ArgumentParser()
        harness.add_run_arguments(run_arguments)
        given = [f"--{name}" for name, default in vars(run_arguments.parse_args([])).items()
                 if getattr(args, name) != default]
        if given:  # they would be ignored: the study file says what is run
            print(f"error: --study runs every cell of {args.study} as that file says; not with {', '.join(given)}",
                  file=sys.stderr)
            raise SystemExit(2)
        cells, seeds = study_cells(args.study)
    else:
        cells, seeds = {args.problem: harness.checked_specs(args)}, 0

    typical = product_rate(512, 60, 600, seconds=1.0)
    best = max(product_rate(1024, 1024, 1024, seconds=1.0), typical)
    print(f"numpy's product on 1 thread: best {best:.1f} GMAC/s, {typical:.1f} at [512, 60] x [60, 600]")
    runs, floors = [], []
    for problem, specs in cells.items():
        spec = next(iter(specs.values()))
        print(f"\n{problem}, seed {spec.seed}, {spec.evaluations} evaluations, {spec.fidelity} profile, 1 thread")
        print(HEADER)
        for run_s, floor in report_runs(specs, best, args.detail).values():
            runs.append(run_s)
            floors.append(floor)
    if args.study:
        hours = {label: makespan([t for t in times for _ in range(seeds)], 2) / 3600
                 for label, times in (("as run", runs), ("at the floor", floors))}
        print(f"\nthe whole study ({len(runs)} cells x {seeds} seeds, one process, no run beside it), "
              f"on 2 workers (longest first): {hours['as run']:.2f} h as run, {hours['at the floor']:.2f} h "
              f"with the counted kernels at {best:.1f} GMAC/s (issue 15: the paper study in <= 1.5 h)")


if __name__ == "__main__":
    main()

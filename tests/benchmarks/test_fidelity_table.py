"""fidelity.py's tables decide each cell by the equivalence test, and print the three verdicts and their count.

The published side is the committed ledger (seeds 200-209); our side is written into a scratch
cache as the script would write it, so that the cells' verdicts are known: ours equal to the
published regrets on a tight cell (equivalent), twice them (different), equal on a heavy-tailed
cell (undetermined at 10 seeds). One run of the script, `--only ours --table-only`, runs nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.fidelity.published import PublishedRun, read_ledger
from wdrbo_dist.problems import make_problem
from wdrbo_dist.run.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(200, 210)
CELLS = {  # cell: (our regret / the published one, seed by seed; then / now for the paired table)
    ("wdrbo", "ackley"): (np.ones(10), np.ones(10)),
    ("erbo", "ackley"): (np.full(10, 2.0), np.full(10, 0.5)),
    ("gp-ucb", "three-hump-camel"): (np.ones(10), np.exp(np.resize([0.5, -0.5], 10))),
}
VERDICT = {("wdrbo", "ackley"): "equivalent", ("erbo", "ackley"): "different",
           ("gp-ucb", "three-hump-camel"): "undetermined at this n"}


def published_regret(ledger: dict[str, dict], algorithm: str, problem: str, seed: int) -> float:
    """R_100 of a published run in the ledger, as fidelity.py computes it."""
    expected = np.asarray(ledger[PublishedRun(algorithm, problem, seed).key()]["stochastic_Y"], dtype=float)
    return float(np.sum(make_problem(problem, "reference").optimal_value - expected.reshape(-1)))


def write_ours(folder: Path, algorithm: str, problem: str, seed: int, regret: float, key: str) -> None:
    (folder / "ours").mkdir(parents=True, exist_ok=True)
    (folder / "ours" / f"{algorithm}_{problem}_{seed}_{key}.json").write_text(json.dumps({"cumulative_regret": regret}))


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> str:
    cache = tmp_path_factory.mktemp("fidelity_cache")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    if head.returncode != 0:
        pytest.skip("not a git checkout: --paired-against needs a revision")
    then, ledger = cache / f"at-{head.stdout.strip()}", read_ledger()
    for (algorithm, problem), (factor, then_factor) in CELLS.items():
        for seed, f, g in zip(SEEDS, factor, then_factor):
            # fidelity.our_spec's run: the key the script looks our result up by
            spec = RunSpec.make(algorithm=algorithm, problem=problem, seed=seed, evaluations=100, init_size=2,
                                fidelity="reference")
            ours = f * published_regret(ledger, algorithm, problem, seed)
            write_ours(cache, algorithm, problem, seed, ours, spec.run_key)
            write_ours(then, algorithm, problem, seed, g * ours, "then")
    command = [sys.executable, str(ROOT / "benchmarks" / "fidelity" / "fidelity.py"), "--only", "ours", "--table-only",
               "--cache", str(cache), "--seeds", "10", "--paired-against", "HEAD",
               "--cells", *[f"{a}:{p}" for a, p in CELLS]]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def rows(printed: str, header_start: str) -> dict[tuple[str, str], dict[str, str]]:
    """The markdown table whose header starts so, as {(algorithm, problem): {column: cell}}."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    found = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        found[(cells["algorithm"], cells["problem"])] = cells
    return found


def test_the_main_table_decides_each_cell_by_tost(printed: str) -> None:
    table = rows(printed, "| algorithm | problem | n ours / published |")
    assert list(next(iter(table.values()))) == [
        "algorithm", "problem", "n ours / published", "ours R_100", "published R_100", "ratio [90% CI]", "TOST p",
        "verdict", "seeds needed"]
    assert {cell: row["verdict"] for cell, row in table.items()} == VERDICT
    assert table[("wdrbo", "ackley")]["published R_100"] == "483 ± 15"  # docs/fidelity.md's seeds 200-209
    assert table[("wdrbo", "ackley")]["ratio [90% CI]"].startswith("1.00 [")
    assert table[("erbo", "ackley")]["ratio [90% CI]"].startswith("2.00 [")
    assert all(row["n ours / published"] == "10 / 10" for row in table.values())
    undetermined = table[("gp-ucb", "three-hump-camel")]
    assert int(undetermined["seeds needed"]) > 10
    assert table[("wdrbo", "ackley")]["seeds needed"] == table[("erbo", "ackley")]["seeds needed"] == ""
    assert table[("wdrbo", "ackley")]["TOST p"] == "< 0.001" and float(undetermined["TOST p"]) >= 0.05


def test_the_paired_table_decides_versions_by_tost_on_the_same_seeds(printed: str) -> None:
    table = rows(printed, "| algorithm | problem | seeds |")
    assert list(next(iter(table.values())))[-4:] == ["ratio [90% CI]", "TOST p", "verdict", "seeds needed"]
    assert {cell: row["verdict"] for cell, row in table.items()} == VERDICT
    same = table[("wdrbo", "ackley")]
    assert (same["lower/tied/higher"], same["ratio [90% CI]"]) == ("0/10/0", "1.00 [1.00, 1.00]")
    assert table[("erbo", "ackley")]["lower/tied/higher"] == "0/0/10"  # now is twice then


def test_each_table_is_followed_by_its_count_and_no_rank_test_is_left(printed: str) -> None:
    assert printed.count("1 equivalent, 1 different, 1 undetermined at this n") == 2
    assert "Mann-Whitney" not in printed and "Holm" not in printed and "Wilcoxon" not in printed
    assert "Below 15 seeds a side" in printed  # 10 seeds: the calibration note


def test_paired_against_runs_the_revisions_own_script_into_a_cache_given_relative_to_the_caller(tmp_path) -> None:
    """`--paired-against HEAD` for one cheap cell and seed: HEAD's fidelity.py runs in a scratch
    worktree (which is its working folder) and writes into CACHE/at-<commit> under the caller's
    folder, not the scratch one; the same records now and then make the cell identical."""
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    if head.returncode != 0:
        pytest.skip("not a git checkout: --paired-against needs a revision")
    command = [sys.executable, str(ROOT / "benchmarks" / "fidelity" / "fidelity.py"), "--only", "ours",
               "--cache", "cache", "--seeds", "1", "--workers", "1", "--paired-against", "HEAD",
               "--cells", "gp-ucb:three-hump-camel"]
    out = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list((tmp_path / "cache" / f"at-{head.stdout.strip()}" / "ours").glob("gp-ucb_three-hump-camel_200_*"))) == 1
    paired = rows(out.stdout, "| algorithm | problem | seeds | R_100 at HEAD")
    assert paired[("gp-ucb", "three-hump-camel")]["lower/tied/higher"] == "0/1/0"

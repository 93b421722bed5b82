"""fidelity_paired.py's row: the paired verdict, the runs that stay together, where they part, the stuck runs
(Newsvendor's) and, on a problem with two decision variables, parting in either coordinate.

Entries are written as the script caches them (our decisions and expected values, the published
decisions and `stochastic_Y`), so the row's numbers are known in advance.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.fidelity.fidelity_paired import row
from wdrbo_dist.problems import make_problem

PROBLEM = "newsvendor"
OPTIMUM = make_problem(PROBLEM, "reference").optimal_value


def entry(x_ours: np.ndarray, x_published: np.ndarray, regret_ours: float, regret_published: float,
          optimum: float = OPTIMUM) -> dict:
    """A cached pair whose R_100 are the given ones (the regret spread evenly over 100 evaluations);
    the published side's X is stored flat, as the published code's pickles are."""
    return {"ours": {"X": x_ours.reshape(100, -1).tolist(), "expected": [optimum - regret_ours / 100] * 100},
            "published": {"X": x_published.reshape(-1).tolist(),
                          "stochastic_Y": [optimum - regret_published / 100] * 100}}


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_pairs_that_agree_are_equivalent_and_counted_as_staying_together() -> None:
    rng = np.random.default_rng(0)
    entries = []
    for k in range(20):
        x = rng.uniform(0.1, 0.3, 100)
        regret = float(np.exp(rng.normal(2.3, 0.5)))
        entries.append(entry(x, x + 0.001, regret, regret * float(np.exp(rng.normal(0, 0.02)))))
    row_cells = cells(row(PROBLEM, "erbo", entries))
    assert row_cells[2] == "20"
    assert row_cells[7] == "equivalent"
    assert row_cells[9] == "20"  # every run within 0.01 throughout
    assert row_cells[10] == "-"  # none parted
    assert row_cells[11] == "0 / 0"


def test_a_run_stuck_at_the_bound_on_one_side_only_is_counted_and_parts_where_it_sticks() -> None:
    x = np.full(100, 0.2)
    stuck = x.copy()
    stuck[3:] = 0.0  # from the fourth evaluation on
    entries = [entry(stuck, x, 47.0, 10.0), entry(x, x, 10.0, 10.0), entry(x, stuck, 10.0, 47.0)]
    row_cells = cells(row(PROBLEM, "gp-ucb", entries))
    assert row_cells[9] == "1"
    assert row_cells[10] == "4"
    assert row_cells[11] == "1 / 1"


def test_a_doubled_regret_on_every_seed_is_different() -> None:
    rng = np.random.default_rng(1)
    entries = []
    for k in range(15):
        regret = float(np.exp(rng.normal(2.3, 0.5)))
        entries.append(entry(np.full(100, 0.2), np.full(100, 0.5), 2 * regret * float(np.exp(rng.normal(0, 0.05))), regret))
    row_cells = cells(row(PROBLEM, "erbo", entries))
    assert row_cells[5].startswith("2.0")
    assert row_cells[7] == "different"
    assert row_cells[10] == "1"


def test_a_pair_whose_published_side_is_in_the_ledger_needs_no_published_code(tmp_path, monkeypatch) -> None:
    import benchmarks.fidelity.fidelity_paired as paired

    monkeypatch.setattr(paired, "LEDGER", tmp_path / "ledger.jsonl")
    mine = {"run_key": "k", "X": [[0.2]] * 100, "expected": [OPTIMUM] * 100, "design": [[0.3], [0.7]],
            "contexts": [0.1] * 100}
    answer = {"X": [[0.2]] * 100, "stochastic_Y": [OPTIMUM] * 100}
    paired.record(paired.draws_key(PROBLEM, "erbo", 300, mine), answer)
    paired.record(paired.draws_key(PROBLEM, "erbo", 300, mine), answer)  # once only
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1
    entry = paired.pair(None, tmp_path, PROBLEM, "erbo", 300, mine)
    assert entry["published"] == answer
    other_draws = {**mine, "contexts": [0.2] * 100}  # other draws: the ledger's answer does not apply
    with pytest.raises(SystemExit, match="--published is needed"):
        paired.pair(None, tmp_path / "none", PROBLEM, "erbo", 300, other_draws)
    with pytest.raises(SystemExit, match="--published is needed"):  # another problem: another pair
        paired.pair(None, tmp_path / "none", "three-hump-camel", "erbo", 300, mine)


def test_on_two_decision_variables_runs_part_where_either_coordinate_parts_and_no_stuck_count_is_shown() -> None:
    optimum = make_problem("modified-branin", "reference").optimal_value
    x = np.full((100, 2), 0.4)
    apart = x.copy()
    apart[6:, 1] += 0.05  # the second coordinate parts at the seventh evaluation
    entries = [entry(x, apart, 800.0, 790.0, optimum), entry(x, x + 0.001, 700.0, 700.0, optimum)]
    row_cells = cells(row("modified-branin", "gp-ucb", entries))
    assert row_cells[1] == "modified-branin"
    assert row_cells[9] == "1"
    assert row_cells[10] == "7"
    assert row_cells[11] == "-"

"""The paper's claims, answered: supported, contradicted or inconclusive at this n, with numbers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.analysis.fakes import fill_store, make_study
from wdrbo_dist.analysis.claims import (
    CONTRADICTED, INCONCLUSIVE, SUPPORTED, claims_display, claims_long, general_problems,
)
from wdrbo_dist.analysis.load import FINISHED, load_study
from wdrbo_dist.analysis.report import build_report

# Each method's typical regret and time per run, as multiples (the study draws lognormal noise).
REGRET = {"wdrbo": 1.0, "erbo": 1.5, "sbo-kde": 1.05, "gp-ucb": 1.2, "drbo-kde": 1.1, "drbo-mmd": 1.6,
          "drbo-mmd-minimax": 1.7, "stableopt": 2.5}
TIME = {"wdrbo": 10.0, "erbo": 9.0, "sbo-kde": 8.0, "gp-ucb": 3.0, "drbo-kde": 110.0, "drbo-mmd": 30.0,
        "drbo-mmd-minimax": 12.0, "stableopt": 5.0}


def study(problems, regret=REGRET, time=TIME, seeds=15, sd=0.1, seed=0) -> SimpleNamespace:
    """A study's runs frame (what `claims_long` reads): lognormal values around the given ones."""
    rng = np.random.default_rng(seed)
    rows = [{"fidelity": "paper", "problem": p, "algorithm": a, "seed": s, "status": FINISHED,
             "final_cumulative_regret": regret[a] * 100 * np.exp(sd * rng.standard_normal()),
             "wall_time_s": time[a] * np.exp(sd * rng.standard_normal())}
            for p in problems for a in regret for s in range(seeds)]
    return SimpleNamespace(fidelities=["paper"], problems=problems, runs=pd.DataFrame(rows))


def verdicts(data) -> dict[str, str]:
    long = claims_long(data)
    return dict(zip(long["claim"], long["verdict"]))


def test_the_general_setting_is_the_problems_that_give_wdrbo_a_centre() -> None:
    assert general_problems(["ackley", "toy-general", "newsvendor"]) == ["toy-general"]


def test_each_claim_is_supported_where_the_data_say_so() -> None:
    data = study(["toy-general", "ackley", "modified-branin", "newsvendor"])
    assert verdicts(data) == {"C1": SUPPORTED, "C2": SUPPORTED, "C3": SUPPORTED, "C4": SUPPORTED}
    long = claims_long(data)
    c4 = long[long["claim"] == "C4"]
    # the paper's Table 1 beside ours: 3 ratios on each of Ackley and Modified Branin
    assert sorted(c4["paper"]) == sorted(["1.01", "13.5", "0.36", "1.21", "9.6", "0.33"])
    c2 = long[long["claim"] == "C2"]
    assert set(c2["problems"]) == {"ackley modified-branin newsvendor"}  # data-driven only
    ratios = dict(zip(c2["numerator"], c2["ratio"]))
    assert 1.4 < ratios["erbo"] < 1.6 and 0.95 < ratios["sbo-kde"] < 1.15  # geometric means: 1.5, 1.05


def test_a_claim_the_data_reverse_is_contradicted() -> None:
    regret = REGRET | {"erbo": 0.6, "sbo-kde": 0.5, "stableopt": 0.9}  # WDRBO loses: 2 x SBO-KDE's regret
    time = TIME | {"drbo-kde": 11.0, "gp-ucb": 20.0}
    data = study(["toy-general", "ackley"], regret=regret, time=time)
    assert verdicts(data) == {"C1": CONTRADICTED, "C2": CONTRADICTED, "C3": CONTRADICTED, "C4": CONTRADICTED}


def test_few_noisy_seeds_leave_a_claim_inconclusive_not_supported() -> None:
    data = study(["toy-general", "ackley"], regret=REGRET | {"erbo": 1.0}, seeds=4, sd=0.5, seed=1)
    assert verdicts(data)["C1"] == INCONCLUSIVE
    two_seeds = study(["toy-general"], seeds=2)  # no interval below 3 seeds
    assert verdicts(two_seeds)["C1"] == INCONCLUSIVE
    assert "(n too small)" in claims_display(claims_long(two_seeds), "paper").loc["C1", "evidence"]


def test_only_the_claims_whose_cells_the_study_holds_are_answered() -> None:
    regret = {"wdrbo": 1.0, "gp-ucb": 1.2}
    data = study(["ackley"], regret=regret, time={"wdrbo": 1.0, "gp-ucb": 0.5})
    assert claims_long(data).empty
    frame = claims_display(claims_long(data), "paper")
    assert frame.empty and "None of the paper's claims" in frame.attrs["note"]


@pytest.mark.parametrize("claim", ["C1"])
def test_the_page_and_summary_md_have_a_claims_section(tmp_path, claim) -> None:
    spec = make_study(tmp_path, ["toy-general"], ["wdrbo", "erbo"], list(range(1, 6)), evaluations=8)
    rng = np.random.default_rng(1)
    fill_store(spec, lambda s: (1.0 if s.algorithm == "erbo" else 0.5) * (1 + 0.05 * rng.random(s.evaluations)))
    _, files = build_report(load_study([spec]), tmp_path / "dash")
    page, summary = files.page.read_text(), files.summary.read_text()
    assert 'id="claims"' in page and "General setting: WDRBO ends with less cumulative regret" in page
    assert "## Claims: the paper's, answered by this study" in summary
    row = next(line for line in summary.splitlines() if line.startswith(f"| {claim} "))
    assert row.rstrip(" |").endswith(SUPPORTED)  # ERBO's regret is twice WDRBO's on every seed
    assert (files.folder / "tables" / "claims.csv").is_file()

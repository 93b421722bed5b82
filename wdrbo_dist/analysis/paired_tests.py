"""The reference method against each baseline, problem by problem: paired signed-rank tests.

Each test is on the log-ratios baseline / reference over the seeds both finished, with the
Hodges-Lehmann ratio and the exact interval the test inverts (`rank_intervals`), so interval and
p-value never disagree; Holm's correction runs over one fidelity profile's tests. The note under
the table says what the seeds allow: the smallest p and the seeds Holm needs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.load import StudyData
from wdrbo_dist.analysis.names import REFERENCE_ALGORITHM, algorithm_name, problem_name
from wdrbo_dist.analysis.rank_intervals import seeds_for_holm, smallest_pvalue
from wdrbo_dist.analysis.statistics import holm, paired_wilcoxon

ALPHA = 0.05
WILCOXON_TITLE = "{reference} vs each baseline: paired Wilcoxon signed-rank tests on log-ratios, Holm-corrected"


def wilcoxon_long(data: StudyData, reference: str | None = REFERENCE_ALGORITHM, alpha: float = ALPHA) -> pd.DataFrame:
    """The reference vs each baseline per problem: paired (same seeds) Wilcoxon signed-rank tests.

    The Holm family is every (problem, baseline) test of one fidelity profile. Differences are
    baseline - reference, so wins, a positive median difference, a ratio above 1 and a positive
    rank-biserial correlation favour the reference. `ratio` is the Hodges-Lehmann estimate of
    baseline / reference with the exact interval the test inverts (`low`, `high` at `level`).
    Seeds where either side did not finish are not paired (n_unpaired); a test without pairs
    has p = NaN and is shown, not dropped. No reference (None): no rows.
    """
    columns = ["fidelity", "problem", "reference", "baseline", "n_pairs", "n_unpaired", "wins", "ties",
               "losses", "median_difference", "scale", "ratio", "low", "high", "level", "statistic", "pvalue",
               "pvalue_holm", "rank_biserial", "significant"]
    rows = []
    for fidelity in data.fidelities if reference is not None else ():
        runs = data.runs[data.runs["fidelity"] == fidelity]
        if reference not in set(runs["algorithm"]):
            continue
        block = []
        for problem in data.problems:
            sub = runs[runs["problem"] == problem]
            if sub.empty or reference not in set(sub["algorithm"]):
                continue
            matrix = sub.pivot(index="seed", columns="algorithm", values="final_cumulative_regret")
            for baseline in [a for a in data.algorithms if a in matrix.columns and a != reference]:
                pair = matrix[[reference, baseline]]
                result = paired_wilcoxon(pair[reference].to_numpy(), pair[baseline].to_numpy())
                block.append({
                    "fidelity": fidelity, "problem": problem, "reference": reference, "baseline": baseline,
                    "n_pairs": result.n_pairs, "n_unpaired": int(len(pair) - result.n_pairs),
                    "wins": result.wins, "ties": result.ties, "losses": result.losses,
                    "median_difference": result.median_difference, "scale": result.scale,
                    "ratio": result.estimate, "low": result.low, "high": result.high, "level": result.level,
                    "statistic": result.statistic,
                    "pvalue": result.pvalue, "rank_biserial": result.rank_biserial,
                })
        adjusted = holm([r["pvalue"] for r in block])
        for row, p_adj in zip(block, adjusted):
            row["pvalue_holm"] = float(p_adj)
            row["significant"] = bool(np.isfinite(p_adj) and p_adj < alpha)
        rows.extend(block)
    return pd.DataFrame(rows, columns=columns)


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.2e}" if value < 1e-3 else f"{value:.3f}"


def _estimate_text(r) -> str:
    """'1.23 [1.05, 1.61] (95.1 %)', or the estimate and why there is no interval."""
    if not math.isfinite(r.ratio):
        return "n/a"
    if not math.isfinite(r.low):
        return f"{r.ratio:.3g} (n too small: p ≥ {smallest_pvalue(r.n_pairs):.3g})"
    return f"{r.ratio:.3g} [{r.low:.3g}, {r.high:.3g}] ({100 * r.level:.1f} %)"  # Δ: a difference (raw scale)


def wilcoxon_note(frame: pd.DataFrame, reference: str, alpha: float = ALPHA) -> str:
    """What n allows: the smallest p of the most paired seeds here and the seeds Holm needs."""
    m = int(frame["pvalue"].notna().sum())
    if not m:
        return ""
    most = int(frame["n_pairs"].max())
    least = smallest_pvalue(most)
    verdict = "so none can be significant" if least >= alpha else f"below α = {alpha:g}"
    return (f"The ratio is the Hodges-Lehmann estimate of baseline / {algorithm_name(reference)} over the paired "
            "seeds (Δ: the difference, where a regret is not positive), with the exact interval the test inverts at "
            f"the level the seeds allow (at least 95 %): it excludes 1 exactly when p < {alpha:g} (before Holm). With "
            f"{most} paired seeds (the most any test here has) the smallest two-sided p is {least:.3g}, {verdict}; "
            f"Holm over these {m} tests needs at least {seeds_for_holm(m, alpha)} paired seeds before any can pass.")


def wilcoxon_display(long: pd.DataFrame, fidelity: str) -> pd.DataFrame:
    """The test table for humans: one row per problem x baseline, the note below it in attrs."""
    frame = long[long["fidelity"] == fidelity]
    rows = []
    for r in frame.itertuples():
        verdict = "n/a (no pairs)" if r.n_pairs == 0 else (
            f"{algorithm_name(r.reference)} {'better' if r.rank_biserial > 0 else 'worse'}"
            if r.significant else "not significant"
        )
        rows.append({
            "problem": problem_name(r.problem),
            "baseline": algorithm_name(r.baseline),
            "pairs": f"{r.n_pairs}" + (f" ({r.n_unpaired} unpaired)" if r.n_unpaired else ""),
            "W/T/L": f"{r.wins}/{r.ties}/{r.losses}",
            "ratio baseline / ref.": _estimate_text(r) if r.scale == "log" else f"Δ = {_estimate_text(r)}",
            "rank-biserial r": "n/a" if not math.isfinite(r.rank_biserial) else f"{r.rank_biserial:+.2f}",
            "p": _p(r.pvalue),
            "p (Holm)": _p(r.pvalue_holm),
            "verdict (α=0.05)": verdict,
        })
    out = pd.DataFrame(rows).set_index(["problem", "baseline"]) if rows else pd.DataFrame()
    if rows:
        out.attrs["note"] = wilcoxon_note(frame, str(frame["reference"].iloc[0]))
    return out

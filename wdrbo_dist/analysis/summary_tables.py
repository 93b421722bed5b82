"""The study's headline numbers: normalised scores, probabilities of improvement, critical difference.

`build_summary` computes them from the tidy run frame (scores.py, ranking.py); `Summary` gives
the long frames for tables/*.csv and display frames for summary.md and the dashboard, which
shows them above the per-problem tables. Every interval is seeded: the same store, the same page.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from wdrbo_dist.analysis.load import StudyData
from wdrbo_dist.analysis.ranking import CriticalDifference, block_matrix, critical_difference, critical_difference_tables
from wdrbo_dist.analysis.scores import ANCHOR, improvement_probabilities, normalised_scores, score_summary
from wdrbo_dist.analysis.tables import REFERENCE_ALGORITHM, algorithm_name, problem_name, to_markdown


@dataclass
class Summary:
    """The headline analysis of a study (see the module docstring)."""

    scores: pd.DataFrame  # one row per finished run
    score_summary: pd.DataFrame  # fidelity x problem (and overall) x algorithm, with intervals
    improvement: pd.DataFrame  # fidelity x problem (and overall) x baseline, with intervals
    critical_difference: dict[str, CriticalDifference]  # per fidelity
    anchor: str = ANCHOR

    def csv_frames(self) -> dict[str, pd.DataFrame]:
        ranks, pairs = critical_difference_tables(self.critical_difference)
        return {"normalised_scores": self.scores, "normalised_score_summary": self.score_summary,
                "probability_of_improvement": self.improvement, "critical_difference": ranks,
                "nemenyi": pairs}

    def display(self, fidelity: str) -> dict[str, pd.DataFrame]:
        """Title -> display frame, in the order the page and summary.md show them."""
        out = {}
        cd = self.critical_difference.get(fidelity)
        if cd is not None and cd.n_blocks:
            out[f"Average ranks over {cd.n_blocks} problem × seed blocks (critical-difference diagram)"] = cd_display(cd)
        scores = self.score_summary[self.score_summary["fidelity"] == fidelity]
        if scores["score"].notna().any():
            out[f"Normalised score 1 − R_T / mean R_T({algorithm_name(self.anchor)}) with 95 % bootstrap "
                "intervals"] = _interval_wide(scores, "algorithm", "score", algorithm_name)
        poi = self.improvement[self.improvement["fidelity"] == fidelity]
        if poi["probability"].notna().any():
            reference = algorithm_name(str(poi["reference"].iloc[0]))
            out[f"Probability that {reference} beats each baseline on the same problem and seed "
                "(95 % bootstrap intervals)"] = _interval_wide(poi, "baseline", "probability", algorithm_name)
        return out


def _two(value: float) -> str:
    """Two decimals, without the sign of a value that rounds to zero ('-0.00')."""
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text


def _text(value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    interval = f" [{_two(low)}, {_two(high)}]" if math.isfinite(low) and math.isfinite(high) else ""
    return f"{_two(value)}{interval}"


def _interval_wide(frame: pd.DataFrame, entity: str, value: str, name: Callable[[str], str]) -> pd.DataFrame:
    """Rows: overall, then the problems; columns: the entities; cells 'estimate [low, high]'."""
    cells = frame.assign(text=[_text(v, lo, hi) for v, lo, hi in zip(frame[value], frame["low"], frame["high"])])
    wide = cells.pivot(index="problem", columns=entity, values="text")
    rows = ["overall", *[p for p in dict.fromkeys(frame["problem"]) if p != "overall"]]
    wide = wide.reindex(index=rows, columns=list(dict.fromkeys(frame[entity]))).fillna("n/a")
    wide.index = ["Overall" if p == "overall" else problem_name(p) for p in wide.index]
    wide.columns = [name(c) for c in wide.columns]
    wide.index.name = "problem"
    return wide


def cd_display(cd: CriticalDifference) -> pd.DataFrame:
    """One row per algorithm, best first: its average rank and the groups it belongs to."""
    rows = []
    for algorithm, rank in cd.average_ranks.items():
        groups = [str(i + 1) for i, g in enumerate(cd.groups) if algorithm in g]
        rows.append({"algorithm": algorithm_name(algorithm), "average rank": f"{rank:.2f}",
                     "not different from (groups)": ", ".join(groups) or "—"})
    frame = pd.DataFrame(rows).set_index("algorithm")
    test = (f"Friedman χ² = {cd.friedman_statistic:.3g}, p = {cd.friedman_pvalue:.3g}"
            if math.isfinite(cd.friedman_pvalue) else "Friedman test: needs 3 methods and 2 blocks")
    frame.loc[test] = [f"CD = {cd.critical_difference:.2f}" if math.isfinite(cd.critical_difference) else "", ""]
    return frame


def build_summary(data: StudyData, reference: str = REFERENCE_ALGORITHM, anchor: str = ANCHOR) -> Summary:
    scores = normalised_scores(data.runs, anchor)
    problems, algorithms = list(data.problems), list(data.algorithms)
    analyses = {f: critical_difference(block_matrix(data.runs, f, algorithms)) for f in data.fidelities}
    return Summary(
        scores=scores,
        score_summary=score_summary(scores, problems, algorithms),
        improvement=improvement_probabilities(data.runs, problems, algorithms, reference),
        critical_difference=analyses,
        anchor=anchor,
    )


def summary_markdown(summary: Summary, fidelities: list[str]) -> str:
    """The headline tables as markdown sections (summary.md puts them first)."""
    lines = []
    for fidelity in fidelities:
        for title, frame in summary.display(fidelity).items():
            lines += [f"## {title} — fidelity `{fidelity}`", "", to_markdown(frame)]
    return "\n".join(lines)

"""The study's headline numbers: normalised scores, probabilities of improvement, critical difference.

`build_summary` computes them from the tidy run frame (scores.py, ranking.py); `Summary` gives
the long frames for tables/*.csv and display frames for summary.md and the dashboard, which
shows them above the per-problem tables. The intervals draw nothing at random, the profile's band
a fixed seed: the same store gives the same page.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from wdrbo_dist.analysis.claims import claims_display, claims_long
from wdrbo_dist.analysis.intervals import CONSERVATIVE, TOO_FEW
from wdrbo_dist.analysis.load import StudyData
from wdrbo_dist.analysis.names import algorithm_name, problem_name, resolve_reference
from wdrbo_dist.analysis.profiles import profile_bands
from wdrbo_dist.analysis.ranking import CriticalDifference, block_matrix, critical_difference, critical_difference_tables
from wdrbo_dist.analysis.scores import (
    ANCHOR, CALIBRATED_SCORE_FROM, improvement_probabilities, normalised_scores, score_summary,
)
from wdrbo_dist.analysis.tables import to_markdown


@dataclass
class Summary:
    """The headline analysis of a study (see the module docstring)."""

    scores: pd.DataFrame  # one row per finished run
    score_summary: pd.DataFrame  # fidelity x problem (and overall) x algorithm, with intervals
    improvement: pd.DataFrame  # fidelity x problem (and overall) x baseline, with intervals
    critical_difference: dict[str, CriticalDifference]  # per fidelity
    profiles: dict[str, pd.DataFrame]  # per fidelity: the performance profile with its band
    claims: pd.DataFrame  # one row per part of each of the paper's claims the study holds (claims.py)
    anchor: str = ANCHOR
    reference_note: str = ""  # why there are no probabilities of improvement, if there are none

    def csv_frames(self) -> dict[str, pd.DataFrame]:
        ranks, pairs = critical_difference_tables(self.critical_difference)
        return {"normalised_scores": self.scores, "normalised_score_summary": self.score_summary,
                "probability_of_improvement": self.improvement, "critical_difference": ranks,
                "nemenyi": pairs, "claims": self.claims}

    def claims_display(self, fidelity: str) -> pd.DataFrame:
        """The Claims section's table: one row per claim of the paper, its evidence and verdict."""
        return claims_display(self.claims, fidelity)

    def display(self, fidelity: str) -> dict[str, pd.DataFrame]:
        """Title -> display frame, in the order the page and summary.md show them (notes in attrs)."""
        out = {}
        cd = self.critical_difference.get(fidelity)
        if cd is not None and cd.n_blocks:
            out[f"Average ranks over {cd.n_blocks} problem{'' if cd.n_blocks == 1 else 's'} (critical-difference diagram)"] = cd_display(cd)
        scores = self.score_summary[self.score_summary["fidelity"] == fidelity]
        if scores["score"].notna().any():
            frame = _interval_wide(scores, "algorithm", "score", algorithm_name)
            frame.attrs["note"] = SCORE_NOTE.format(anchor=algorithm_name(self.anchor),
                                                    calibrated=CALIBRATED_SCORE_FROM)
            out[f"Normalised score 1 − R_T / R_T({algorithm_name(self.anchor)}) with 95 % intervals"] = frame
        poi = self.improvement[self.improvement["fidelity"] == fidelity]
        if poi["probability"].notna().any():
            reference = algorithm_name(str(poi["reference"].iloc[0]))
            frame = _interval_wide(poi, "baseline", "probability", algorithm_name, marks=False)
            frame.attrs["note"] = POI_NOTE
            out[f"Probability that {reference} beats each baseline on the same problem and seed "
                "(exact 95 % intervals, conservative)"] = frame
        elif self.reference_note:
            frame = pd.DataFrame()
            frame.attrs["note"] = self.reference_note
            out["Probability of improvement"] = frame
        return out


SCORE_NOTE = ("Per problem: 1 − the ratio of geometric means of R_T to {anchor}'s over the seeds both finished, with "
              "the t-interval of the paired log-ratios (exact for lognormal regrets; {anchor}'s uncertainty is in "
              "it). Overall: 1 − exp of the interquartile mean over problems of those log-ratios (with fewer than 4 "
              "problems nothing is trimmed), Welch-Satterthwaite t. † conservative: below {calibrated} seeds the "
              "simulation of docs/results.md measured up to 97.6 % (more than 95 %); (n too small): fewer than 3 "
              "paired seeds, no interval.")
POI_NOTE = ("Per problem: wins (ties ½) over the paired seeds with the exact Clopper-Pearson interval; overall: the "
            "mean over problems with Clopper-Pearson on the pooled count. Both hold at least 95 % for any win "
            "rate; at 3 to 15 seeds the simulation of docs/results.md measured 95.9-100 %: conservative, wider "
            "than 95 % needs.")


def _two(value: float) -> str:
    """Two decimals, without the sign of a value that rounds to zero ('-0.00')."""
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text


def _text(value: float, low: float, high: float, flag: str = "") -> str:
    """'0.50 [0.25, 0.75]', † where the interval is conservative, '(n too small)' without one."""
    if not math.isfinite(value):
        return "n/a"
    if flag == TOO_FEW or not (math.isfinite(low) and math.isfinite(high)):
        return f"{_two(value)} (n too small)" if flag == TOO_FEW else _two(value)
    return f"{_two(value)} [{_two(low)}, {_two(high)}]" + ("†" if flag == CONSERVATIVE else "")


def _interval_wide(frame: pd.DataFrame, entity: str, value: str, name: Callable[[str], str],
                   marks: bool = True) -> pd.DataFrame:
    """Rows: overall, then the problems; columns: the entities; cells 'estimate [low, high]'."""
    flags = frame["flag"] if marks else [""] * len(frame)
    cells = frame.assign(text=[_text(v, lo, hi, f)
                               for v, lo, hi, f in zip(frame[value], frame["low"], frame["high"], flags)])
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
            if math.isfinite(cd.friedman_pvalue) else "Friedman test: needs 3 methods and 2 problems")
    frame.loc[test] = [f"CD = {cd.critical_difference:.2f}" if math.isfinite(cd.critical_difference) else "", ""]
    return frame


def build_summary(data: StudyData, reference: str | None = None, anchor: str = ANCHOR) -> Summary:
    """The headline analysis; `reference` as `tables.build_tables` takes it."""
    label, note = resolve_reference(data.algorithms, reference)
    problems, algorithms = list(data.problems), list(data.algorithms)
    analyses = {f: critical_difference(block_matrix(data.runs, f, algorithms)) for f in data.fidelities}
    improvement = improvement_probabilities(data.runs, problems, algorithms, label)
    return Summary(
        scores=normalised_scores(data.runs, anchor),
        score_summary=score_summary(data.runs, problems, algorithms, anchor),
        improvement=improvement,
        critical_difference=analyses,
        profiles={f: profile_bands(data.runs, f, algorithms, anchor) for f in data.fidelities},
        claims=claims_long(data),
        anchor=anchor,
        reference_note=note,
    )


def summary_markdown(summary: Summary, fidelities: list[str]) -> str:
    """The headline tables as markdown sections (summary.md puts them first)."""
    lines = []
    for fidelity in fidelities:
        lines += [f"## Claims: the paper's, answered by this study — fidelity `{fidelity}`", "",
                  to_markdown(summary.claims_display(fidelity))]
    for fidelity in fidelities:
        for title, frame in summary.display(fidelity).items():
            lines += [f"## {title} — fidelity `{fidelity}`", "", to_markdown(frame)]
    return "\n".join(lines)

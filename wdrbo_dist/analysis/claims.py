"""The paper's claims, answered by a study that holds their cells.

Each claim is a statement about ratios of regret (or of time) between WDRBO and other methods.
A ratio is the geometric mean over the seeds both finished of one method's value over the
other's: per problem the t-interval of the paired log-ratios (the interval the report's scores
use, calibrated at 10 seeds and more), over problems their interquartile mean with Welch-
Satterthwaite's t (`intervals.iqm_interval`). A claim is "supported" when the 95 % interval is
on its side of the claim's threshold, "contradicted" when it is wholly on the other side, and
"inconclusive at this n" otherwise. A claim over several comparisons needs each of them
(intersection-union: no correction for their number). docs/results.md says why each threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.intervals import MIN_T_SEEDS, iqm_interval, t_interval
from wdrbo_dist.analysis.load import FINISHED, StudyData
from wdrbo_dist.analysis.names import algorithm_name, problem_name

SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive at this n"
NON_INFERIORITY = 1.25  # "competitive": WDRBO's regret at most 1.25 x the other's (geometric means)
CLOSE_TIME = 1.5  # "close" times: within a factor 1.5 either way
FAR_TIME = 3.0  # "far above": more than 3 x

# The paper's Table 1 (seconds per 100-iteration run), as ratios: problem -> (numerator,
# denominator) -> ratio.
PAPER_TIME_RATIOS: dict[str, dict[tuple[str, str], float]] = {
    "ackley": {("wdrbo", "erbo"): 1.01, ("drbo-kde", "wdrbo"): 13.5, ("gp-ucb", "erbo"): 0.36},
    "modified-branin": {("wdrbo", "erbo"): 1.21, ("drbo-kde", "wdrbo"): 9.6, ("gp-ucb", "erbo"): 0.33},
}


@dataclass(frozen=True)
class Ratio:
    """A geometric-mean ratio of `numerator` over `denominator` with its 95 % interval."""

    numerator: str
    denominator: str
    problems: tuple[str, ...]
    n_pairs: int  # seeds paired, summed over problems
    estimate: float
    low: float  # NaN: too few seeds for an interval
    high: float

    def text(self) -> str:
        where = problem_name(self.problems[0]) if len(self.problems) == 1 else f"{len(self.problems)} problems"
        bounds = (f"[{self.low:.2f}, {self.high:.2f}]" if math.isfinite(self.low) else "(n too small)")
        return (f"{algorithm_name(self.numerator)}/{algorithm_name(self.denominator)} {self.estimate:.2f} {bounds}, "
                f"{where}, n = {self.n_pairs}")


def general_problems(problems: Sequence[str]) -> list[str]:
    """The problems of the general setting: those that give WDRBO a centre distribution."""
    from wdrbo_dist.problems import PROBLEMS
    from wdrbo_dist.problems.base import Problem

    return [p for p in problems if p in PROBLEMS and PROBLEMS[p].centre_distribution is not Problem.centre_distribution]


def paired_ratio(runs: pd.DataFrame, numerator: str, denominator: str, problems: Sequence[str],
                 column: str = "final_cumulative_regret") -> Ratio | None:
    """The ratio over `problems` (those where both methods have paired positive values); None without any."""
    finished = runs[(runs["status"] == FINISHED) & runs["algorithm"].isin([numerator, denominator])]
    per: list[tuple[str, float, float, int]] = []
    for problem in problems:
        wide = finished[finished["problem"] == problem].pivot_table(index="seed", columns="algorithm",
                                                                    values=column, aggfunc="first")
        if numerator not in wide or denominator not in wide:
            continue
        pair = wide[[numerator, denominator]].astype(float).dropna()
        pair = pair[(pair > 0).all(axis=1) & np.isfinite(pair).all(axis=1)]
        if pair.empty:
            continue
        d = np.log(pair[numerator].to_numpy()) - np.log(pair[denominator].to_numpy())
        centre, _, _, se = (float(v) for v in t_interval(d))
        per.append((problem, centre, se, d.size))
    if not per:
        return None
    centres, ses, counts = (np.array([p[i] for p in per], dtype=float) for i in (1, 2, 3))
    centre, low, high = (float(v) for v in iqm_interval(centres, ses, counts - 1))
    if counts.min() < MIN_T_SEEDS:
        low = high = math.nan
    return Ratio(numerator, denominator, tuple(p[0] for p in per), int(counts.sum()),
                 math.exp(centre), math.exp(low), math.exp(high))


def above(ratio: Ratio, threshold: float) -> str:
    """Is the ratio above `threshold`? By its interval: supported, contradicted or inconclusive."""
    if not math.isfinite(ratio.low):
        return INCONCLUSIVE
    return SUPPORTED if ratio.low > threshold else CONTRADICTED if ratio.high < threshold else INCONCLUSIVE


def below(ratio: Ratio, threshold: float) -> str:
    return {SUPPORTED: CONTRADICTED, CONTRADICTED: SUPPORTED}.get(above(ratio, threshold), INCONCLUSIVE)


def within(ratio: Ratio, factor: float) -> str:
    """Within a factor of `factor` either way: the whole interval inside, or wholly outside."""
    if not math.isfinite(ratio.low):
        return INCONCLUSIVE
    if 1 / factor < ratio.low and ratio.high < factor:
        return SUPPORTED
    return CONTRADICTED if ratio.high < 1 / factor or ratio.low > factor else INCONCLUSIVE


def combined(verdicts: Sequence[str]) -> str:
    """Every part supported: supported; any contradicted: contradicted; else inconclusive."""
    if verdicts and all(v == SUPPORTED for v in verdicts):
        return SUPPORTED
    return CONTRADICTED if CONTRADICTED in verdicts else INCONCLUSIVE


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    test: str
    parts: tuple[tuple[Ratio, str, str], ...]  # (ratio, its verdict, the paper's value or '')

    @property
    def verdict(self) -> str:
        return combined([verdict for _, verdict, _ in self.parts])


def _claims(runs: pd.DataFrame, problems: list[str], algorithms: set[str]) -> list[Claim]:
    general = general_problems(problems)
    data_driven = [p for p in problems if p not in general]
    claims = []

    def ratios(pairs: Sequence[tuple[str, str]], where: list[str], column: str = "final_cumulative_regret"):
        found = [paired_ratio(runs, a, b, where, column) for a, b in pairs if {a, b} <= algorithms]
        return [r for r in found if r is not None]

    c1 = ratios([("erbo", "wdrbo")], general)
    if c1:
        claims.append(Claim("C1", "General setting: WDRBO ends with less cumulative regret than ERBO.",
                            "ERBO/WDRBO ratio of R_T above 1", tuple((r, above(r, 1.0), "") for r in c1)))
    c2 = ratios([("erbo", "wdrbo"), ("sbo-kde", "wdrbo")], data_driven)
    if c2:
        claims.append(Claim("C2", "Data-driven setting: WDRBO is competitive with ERBO and SBO-KDE.",
                            f"non-inferiority: other/WDRBO ratio of R_T above 1/{NON_INFERIORITY:g} "
                            f"(WDRBO at most {NON_INFERIORITY:g} x the other's regret)",
                            tuple((r, above(r, 1 / NON_INFERIORITY), "") for r in c2)))
    c3 = ratios([("drbo-mmd", "wdrbo"), ("drbo-mmd-minimax", "wdrbo"), ("stableopt", "wdrbo")], data_driven)
    if c3:
        claims.append(Claim("C3", "DRBO-MMD, its minimax approximation and StableOpt are not competitive with WDRBO.",
                            "other/WDRBO ratio of R_T above 1 (contradicted: shown competitive, below "
                            f"{NON_INFERIORITY:g})",
                            tuple((r, _not_competitive(r), "") for r in c3)))
    c4: list[tuple[Ratio, str, str]] = []
    for problem, paper in PAPER_TIME_RATIOS.items():
        if problem not in problems:
            continue
        for (a, b), value in paper.items():
            found = ratios([(a, b)], [problem], "wall_time_s")
            if not found:
                continue
            ratio = found[0]
            verdict = (within(ratio, CLOSE_TIME) if (a, b) == ("wdrbo", "erbo")
                       else above(ratio, FAR_TIME) if a == "drbo-kde" else below(ratio, 1.0))
            c4.append((ratio, verdict, f"{value:g}"))
    if c4:
        claims.append(Claim("C4", "Time per 100-iteration run: WDRBO close to ERBO, DRBO-KDE far above, GP-UCB "
                                  "fastest (the paper's Table 1).",
                            f"ratio of wall times: WDRBO/ERBO within {CLOSE_TIME:g}x, DRBO-KDE/WDRBO above "
                            f"{FAR_TIME:g}, GP-UCB/ERBO below 1", tuple(c4)))
    return claims


def _not_competitive(ratio: Ratio) -> str:
    """Supported: the other's regret is above WDRBO's; contradicted: shown below 1.25 x WDRBO's."""
    if not math.isfinite(ratio.low):
        return INCONCLUSIVE
    return SUPPORTED if ratio.low > 1.0 else CONTRADICTED if ratio.high < NON_INFERIORITY else INCONCLUSIVE


CLAIM_COLUMNS = ["fidelity", "claim", "statement", "test", "numerator", "denominator", "problems", "n_pairs",
                 "ratio", "low", "high", "paper", "part_verdict", "verdict"]


def claims_long(data: StudyData) -> pd.DataFrame:
    """One row per claim part (fidelity x claim x ratio): the CSV behind the Claims table."""
    rows = []
    for fidelity in data.fidelities:
        runs = data.runs[data.runs["fidelity"] == fidelity]
        for claim in _claims(runs, list(data.problems), set(runs["algorithm"])):
            for ratio, verdict, paper in claim.parts:
                rows.append({"fidelity": fidelity, "claim": claim.key, "statement": claim.statement, "test": claim.test,
                             "numerator": ratio.numerator, "denominator": ratio.denominator,
                             "problems": " ".join(ratio.problems), "n_pairs": ratio.n_pairs, "ratio": ratio.estimate,
                             "low": ratio.low, "high": ratio.high, "paper": paper, "part_verdict": verdict,
                             "verdict": claim.verdict})
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


CLAIMS_NOTE = ("Ratios are geometric means over the paired seeds (per problem the paired log-ratios' t-interval; "
               "over problems their interquartile mean, Welch-Satterthwaite t), 95 % intervals. Supported: the "
               "interval lies on the claim's side of its threshold; contradicted: wholly on the other side; "
               "otherwise inconclusive at this n. A claim holds when each of its parts does. Below 10 seeds the "
               "intervals are conservative; below 3 there are none.")


def claims_display(long: pd.DataFrame, fidelity: str) -> pd.DataFrame:
    """One row per claim: what the paper says, the evidence (each ratio beside the paper's), the verdict."""
    rows = []
    for key, claim in long[long["fidelity"] == fidelity].groupby("claim", sort=True):
        evidence = []
        for row in claim.itertuples():
            ratio = Ratio(row.numerator, row.denominator, tuple(row.problems.split()), int(row.n_pairs),
                          float(row.ratio), float(row.low), float(row.high))
            paper = f" (paper {row.paper})" if row.paper else ""
            evidence.append(f"{ratio.text()}{paper}: {row.part_verdict}")
        first = claim.iloc[0]
        rows.append({"claim": key, "the paper says": first["statement"], "test": first["test"],
                     "evidence": "; ".join(evidence), "verdict": first["verdict"]})
    frame = pd.DataFrame(rows, columns=["claim", "the paper says", "test", "evidence", "verdict"]).set_index("claim")
    frame.attrs["note"] = CLAIMS_NOTE if rows else "None of the paper's claims has its cells in this study."
    return frame

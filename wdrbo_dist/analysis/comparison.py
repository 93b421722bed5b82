"""Two studies side by side: every problem x algorithm cell that both ran, compared.

Users: the two fidelity profiles, two versions of the package, two settings of a study. Per
cell: the ratio of mean final cumulative regrets R_T(B) / R_T(A) with a 95 % bootstrap
interval, and a two-sided test. Runs of the same seed share their random streams, so where
both studies finished at least two common seeds the cell is paired (seeds resampled together,
Wilcoxon signed-rank); otherwise it is not (each side resampled apart, Mann-Whitney U). The
p-values are Holm-corrected over the page's cells.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs
from scipy import stats

from wdrbo_dist.analysis.figures import colour
from wdrbo_dist.analysis.load import FINISHED, StudyData
from wdrbo_dist.analysis.scores import LEVEL, RESAMPLES, SEED
from wdrbo_dist.analysis.statistics import (
    holm, is_data, mean_se, paired_wilcoxon, ratio_of_means_interval, significant_digits_format,
)
from wdrbo_dist.analysis.tables import algorithm_name, problem_name, to_markdown

ALPHA = 0.05
COLUMNS = ["problem", "algorithm", "n_a", "n_b", "n_pairs", "mean_a", "se_a", "mean_b", "se_b", "ratio", "low",
           "high", "test", "statistic", "pvalue", "pvalue_holm", "significant"]


def _finished(data: StudyData, problem: str, algorithm: str) -> pd.Series:
    runs = data.runs[(data.runs["problem"] == problem) & (data.runs["algorithm"] == algorithm)
                     & (data.runs["status"] == FINISHED)]
    values = runs.groupby("seed")["final_cumulative_regret"].first().astype(float)
    return values[is_data(values.to_numpy())]


def paired_ratio_interval(a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, level: float = LEVEL,
                          seed: int = SEED) -> tuple[float, float]:
    """Percentile-bootstrap interval of mean(b) / mean(a) with the pairs resampled together
    (`rng.integers(0, n, (resamples, n))`); NaN when a resampled mean(a) is not positive."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, a.size, size=(resamples, a.size))
    bottom, top = a[index].mean(axis=1), b[index].mean(axis=1)
    if not bool((bottom > 0).all()):
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(top / bottom, [tail, 1.0 - tail])
    return float(low), float(high)


def compare_cells(a: StudyData, b: StudyData, resamples: int = RESAMPLES) -> pd.DataFrame:
    """One row per problem x algorithm present in both studies (A's order), see the module docstring."""
    rows = []
    for problem in [p for p in a.problems if p in b.problems]:
        for algorithm in [x for x in a.algorithms if x in b.algorithms]:
            ra, rb = _finished(a, problem, algorithm), _finished(b, problem, algorithm)
            common = ra.index.intersection(rb.index)
            paired = len(common) >= 2
            x, y = (ra[common], rb[common]) if paired else (ra, rb)
            sa, sb = mean_se(x), mean_se(y)
            ratio = sb.mean / sa.mean if sa.n and sb.n and sa.mean > 0 else math.nan
            if paired:
                low, high = paired_ratio_interval(x.to_numpy(), y.to_numpy(), resamples)
                test = paired_wilcoxon(x.to_numpy(), y.to_numpy())
                name, statistic, pvalue = "Wilcoxon signed-rank (paired)", test.statistic, test.pvalue
            else:
                low, high = ratio_of_means_interval(y, x, resamples=resamples, seed=SEED)
                name, statistic, pvalue = "Mann-Whitney U", math.nan, math.nan
                if len(x) and len(y):
                    result = stats.mannwhitneyu(x, y, alternative="two-sided")
                    statistic, pvalue = float(result.statistic), float(result.pvalue)
            rows.append({"problem": problem, "algorithm": algorithm, "n_a": len(ra), "n_b": len(rb),
                         "n_pairs": len(common) if paired else 0, "mean_a": sa.mean, "se_a": sa.se,
                         "mean_b": sb.mean, "se_b": sb.se, "ratio": ratio, "low": low, "high": high,
                         "test": name, "statistic": statistic, "pvalue": pvalue})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["pvalue_holm"] = holm(frame["pvalue"].to_numpy(dtype=float)) if len(frame) else []
    frame["significant"] = frame["pvalue_holm"].lt(ALPHA)
    return frame


def _p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else (f"{value:.2e}" if value < 1e-3 else f"{value:.3f}")


def comparison_display(cells: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """The page's table: one row per cell, the two means, the ratio with its interval, the test."""
    rows = []
    for r in cells.itertuples():
        interval = f" [{r.low:.3g}, {r.high:.3g}]" if math.isfinite(r.low) else ""
        verdict = "n/a" if not math.isfinite(r.pvalue_holm) else (
            (f"{b} lower" if r.ratio < 1 else f"{a} lower") if r.significant else "not significant")
        rows.append({"problem": problem_name(r.problem), "algorithm": algorithm_name(r.algorithm),
                     f"{a}: R_T (n)": f"{significant_digits_format(r.mean_a, r.se_a)} ({r.n_a})",
                     f"{b}: R_T (n)": f"{significant_digits_format(r.mean_b, r.se_b)} ({r.n_b})",
                     "ratio B / A [95 %]": ("n/a" if not math.isfinite(r.ratio) else f"{r.ratio:.3g}") + interval,
                     "test": r.test + (f", {r.n_pairs} pairs" if r.n_pairs else ""),
                     "p": _p(r.pvalue), "p (Holm)": _p(r.pvalue_holm), "verdict (α=0.05)": verdict})
    return pd.DataFrame(rows).set_index(["problem", "algorithm"]) if rows else pd.DataFrame()


def ratio_figure(cells: pd.DataFrame, order: list[str]) -> go.Figure:
    """A forest plot: per cell the ratio B / A and its interval on a log axis, 1 = no change."""
    fig = go.Figure()
    shown = cells[np.isfinite(cells["ratio"].to_numpy(dtype=float))]
    for r in shown.itertuples():
        label = f"{problem_name(r.problem)} · {algorithm_name(r.algorithm)}"
        has = math.isfinite(r.low) and math.isfinite(r.high)
        fig.add_trace(go.Scatter(
            x=[r.ratio], y=[label], mode="markers", showlegend=False, name=label,
            marker=dict(color=colour(r.algorithm, order), size=10),
            error_x=dict(type="data", symmetric=False, array=[r.high - r.ratio if has else 0],
                         arrayminus=[r.ratio - r.low if has else 0], thickness=2.5),
            hovertemplate=f"{label}: B / A = %{{x:.3g}}, p (Holm) = {_p(r.pvalue_holm)}<extra></extra>"))
    fig.add_vline(x=1.0, line=dict(color="#888", dash="dash", width=1))
    fig.update_xaxes(type="log", title_text="R_T(B) / R_T(A): < 1 means B ends with less regret")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=140 + 26 * max(1, len(shown)), template="plotly_white",
                      margin=dict(l=60, r=30, t=40, b=50))
    return fig


@dataclass
class ComparisonFiles:
    folder: Path
    page: Path
    table: Path
    summary: Path


def write_comparison(a: StudyData, b: StudyData, folder: Path, sources: tuple[str, str],
                     page: bool = True) -> tuple[pd.DataFrame, ComparisonFiles]:
    """comparison.csv, summary.md and (with `page`) index.html of A against B under `folder`."""
    from wdrbo_dist.analysis.report import CSS, html_table

    cells = compare_cells(a, b)
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / "comparison.csv"
    cells.to_csv(table, index=False)
    display = comparison_display(cells, "A", "B")
    intro = (f"A = study `{a.name}` ({sources[0]}, fidelity {', '.join(a.fidelities)}), "
             f"B = study `{b.name}` ({sources[1]}, fidelity {', '.join(b.fidelities)}). Metric: "
             f"{a.metric.description}. {len(cells)} cells run by both.")
    summary = folder / "summary.md"
    summary.write_text(f"# A against B\n\n{intro}\n\n{to_markdown(display)}")
    path = folder / "index.html"
    if page:
        div = pio.to_html(ratio_figure(cells, list(a.algorithms)), full_html=False, include_plotlyjs=False,
                          div_id="fig-ratio", config={"responsive": True, "displaylogo": False})
        path.write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>wdrbo-dist: {html.escape(a.name)} against {html.escape(b.name)}</title>
<style>{CSS}</style><script type="text/javascript">{get_plotlyjs()}</script></head><body>
<h1>Study <code>{html.escape(a.name)}</code> (A) against <code>{html.escape(b.name)}</code> (B)</h1>
<p class="meta">{html.escape(intro.replace("`", ""))}</p>
<div class="figure" id="ratio"><h3>Ratio of final cumulative regrets, B / A</h3>
<p class="caption">For every problem and algorithm both studies ran: the ratio of their mean final cumulative
regrets with a 95 % bootstrap interval (log axis; left of 1, B ends with less regret). Cells with at least two
common seeds are paired (seeds resampled together, Wilcoxon signed-rank test); the others are not (Mann-Whitney
U). p-values are Holm-corrected over the cells.</p>{div}</div>
<h2>Cell by cell</h2>{html_table(display)}
</body></html>
""", encoding="utf-8")
    return cells, ComparisonFiles(folder, path, table, summary)

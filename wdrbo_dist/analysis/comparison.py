"""Two studies side by side: every problem x algorithm cell that both ran, compared.

Users: the two fidelity profiles, two versions of the package, two settings of a study. Per
cell, on the log-ratios of final cumulative regret: with at least two common seeds a paired
Wilcoxon signed-rank test (runs of one seed share their random streams), else Mann-Whitney U;
each with the Hodges-Lehmann ratio B / A and the exact interval the test inverts. Cells whose
records are identical in both studies are marked so and left out of the Holm family.
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

from wdrbo_dist.analysis.figures import colour
from wdrbo_dist.analysis.load import FINISHED, StudyData
from wdrbo_dist.analysis.names import algorithm_name, problem_name
from wdrbo_dist.analysis.rank_intervals import RankInterval, rank_sum, rank_sum_cdf, signed_rank, smallest_pvalue
from wdrbo_dist.analysis.statistics import LOG_DECIMALS, holm, is_data, mean_se, significant_digits_format
from wdrbo_dist.analysis.tables import to_markdown

ALPHA = 0.05
IDENTICAL = "identical"
COLUMNS = ["problem", "algorithm", "n_a", "n_b", "finished_a", "finished_b", "n_pairs", "mean_a", "se_a", "mean_b",
           "se_b", "scale", "ratio", "low", "high", "level", "smallest_p", "test", "pvalue", "pvalue_holm",
           "significant"]


def _finished(data: StudyData, problem: str, algorithm: str) -> pd.Series:
    runs = data.runs[(data.runs["problem"] == problem) & (data.runs["algorithm"] == algorithm)
                     & (data.runs["status"] == FINISHED)]
    values = runs.groupby("seed")["final_cumulative_regret"].first().astype(float)
    return values[is_data(values.to_numpy())]


def _records(data: StudyData, problem: str, algorithm: str) -> dict[int, np.ndarray]:
    """Seed -> the cell's per-step regret of a finished run, in step order."""
    steps = data.steps[(data.steps["problem"] == problem) & (data.steps["algorithm"] == algorithm)]
    return {int(seed): group.sort_values("step")["regret"].to_numpy(dtype=float)
            for seed, group in steps.groupby("seed")}


def identical_records(a: StudyData, b: StudyData, problem: str, algorithm: str) -> bool:
    """Both studies finished the same seeds of the cell, with the same regret at every step."""
    ra, rb = _records(a, problem, algorithm), _records(b, problem, algorithm)
    return bool(ra) and ra.keys() == rb.keys() and all(np.array_equal(ra[s], rb[s], equal_nan=True) for s in ra)


def _test(x: np.ndarray, y: np.ndarray, paired: bool) -> tuple[str, RankInterval]:
    """('log' or 'raw', the rank test of y against x with its Hodges-Lehmann interval)."""
    scale = "log" if bool((x > 0).all() and (y > 0).all()) and x.size and y.size else "raw"
    tx, ty = (np.log(x), np.log(y)) if scale == "log" else (x, y)
    if paired:
        d = ty - tx
        return scale, signed_rank(np.round(d, LOG_DECIMALS) if scale == "log" else d, ALPHA)
    return scale, rank_sum(tx, ty, ALPHA)


def compare_cells(a: StudyData, b: StudyData) -> pd.DataFrame:
    """One row per problem x algorithm present in both studies (A's order), see the module docstring.
    n_a / n_b: the seeds each side's numbers use (the common ones when paired)."""
    rows = []
    for problem in [p for p in a.problems if p in b.problems]:
        for algorithm in [x for x in a.algorithms if x in b.algorithms]:
            ra, rb = _finished(a, problem, algorithm), _finished(b, problem, algorithm)
            common = ra.index.intersection(rb.index)
            paired = len(common) >= 2
            x, y = (ra[common], rb[common]) if paired else (ra, rb)
            sa, sb = mean_se(x), mean_se(y)
            row = {"problem": problem, "algorithm": algorithm, "n_a": len(x), "n_b": len(y),
                   "finished_a": len(ra), "finished_b": len(rb), "n_pairs": len(common) if paired else 0,
                   "mean_a": sa.mean, "se_a": sa.se, "mean_b": sb.mean, "se_b": sb.se, "scale": "log",
                   "ratio": math.nan, "low": math.nan, "high": math.nan, "level": math.nan,
                   "smallest_p": math.nan, "pvalue": math.nan}
            if identical_records(a, b, problem, algorithm):
                row.update(test=IDENTICAL, ratio=1.0)
            elif len(x) and len(y):
                scale, result = _test(x.to_numpy(), y.to_numpy(), paired)
                back = math.exp if scale == "log" else float
                row.update(scale=scale, ratio=back(result.estimate), level=result.level, pvalue=result.pvalue,
                           test="Wilcoxon signed-rank (paired)" if paired else "Mann-Whitney U",
                           smallest_p=smallest_pvalue(len(x)) if paired else
                           float(min(1.0, 2 * rank_sum_cdf(len(x), len(y))[0])))
                if math.isfinite(result.low):
                    row.update(low=back(result.low), high=back(result.high))
            else:
                row.update(test="n/a (a side without finished runs)")
            rows.append(row)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["pvalue_holm"] = holm(frame["pvalue"].to_numpy(dtype=float)) if len(frame) else []
    frame["significant"] = frame["pvalue_holm"].lt(ALPHA)
    return frame


def _p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else (f"{value:.2e}" if value < 1e-3 else f"{value:.3f}")


def _ratio_text(r) -> str:
    if r.test == IDENTICAL:
        return "1 (identical records)"
    if not math.isfinite(r.ratio):
        return "n/a"
    text = f"{r.ratio:.3g}" if r.scale == "log" else f"Δ = {r.ratio:.3g}"
    if not math.isfinite(r.low):
        return f"{text} (n too small: p ≥ {r.smallest_p:.3g})"
    return f"{text} [{r.low:.3g}, {r.high:.3g}] ({100 * r.level:.1f} %)"


def comparison_display(cells: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """The page's table: one row per cell, the two means, the ratio with its interval, the test."""
    rows = []
    for r in cells.itertuples():
        verdict = IDENTICAL if r.test == IDENTICAL else "n/a" if not math.isfinite(r.pvalue_holm) else (
            (f"{b} lower" if r.ratio < (1 if r.scale == "log" else 0) else f"{a} lower")
            if r.significant else "not significant")
        rows.append({"problem": problem_name(r.problem), "algorithm": algorithm_name(r.algorithm),
                     f"{a}: R_T (n)": f"{significant_digits_format(r.mean_a, r.se_a)} ({r.n_a})",
                     f"{b}: R_T (n)": f"{significant_digits_format(r.mean_b, r.se_b)} ({r.n_b})",
                     "ratio B / A": _ratio_text(r),
                     "test": r.test + (f", {r.n_pairs} pairs" if r.n_pairs else ""),
                     "p": _p(r.pvalue), "p (Holm)": _p(r.pvalue_holm), "verdict (α=0.05)": verdict})
    out = pd.DataFrame(rows).set_index(["problem", "algorithm"]) if rows else pd.DataFrame()
    out.attrs["note"] = COMPARISON_NOTE
    return out


COMPARISON_NOTE = (
    "n: the seeds each mean uses (the common seeds when a cell is paired). The ratio is the Hodges-Lehmann "
    "estimate of R_T(B) / R_T(A) (Δ: the difference B − A, where a regret is not positive) with the exact "
    "interval its test inverts, at the level the seeds allow (at least 95 %): it excludes 1 exactly when p < 0.05 "
    "(before Holm); where no count reaches 95 % the smallest possible p is shown instead. Cells whose records are "
    "identical in both studies are marked identical and left out of the Holm family.")


def ratio_figure(cells: pd.DataFrame, order: list[str]) -> go.Figure:
    """A forest plot: per cell the ratio B / A and its interval on a log axis, 1 = no change."""
    fig = go.Figure()
    shown = cells[np.isfinite(cells["ratio"].to_numpy(dtype=float)) & (cells["scale"] == "log")]
    for r in shown.itertuples():
        label = f"{problem_name(r.problem)} · {algorithm_name(r.algorithm)}"
        has = math.isfinite(r.low) and math.isfinite(r.high) and r.scale == "log"
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
    same = int((cells["test"] == IDENTICAL).sum())
    intro = (f"A = study `{a.name}` ({sources[0]}, fidelity {', '.join(a.fidelities)}), "
             f"B = study `{b.name}` ({sources[1]}, fidelity {', '.join(b.fidelities)}). Metric: "
             f"{a.metric.description}. {len(cells)} cells run by both, {same} of them with identical records.")
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
<p class="caption">For every problem and algorithm both studies ran: the Hodges-Lehmann ratio of their final
cumulative regrets B / A with the exact interval its rank test inverts (log axis; left of 1, B ends with less
regret). Cells with at least two common seeds are paired (Wilcoxon signed-rank on the log-ratios); the others are
not (Mann-Whitney U). p-values are Holm-corrected over the cells whose records differ.</p>{div}</div>
<h2>Cell by cell</h2>{html_table(display)}
</body></html>
""", encoding="utf-8")
    return cells, ComparisonFiles(folder, path, table, summary)

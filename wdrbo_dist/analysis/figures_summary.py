"""The figures the dashboard opens on: which method wins, by how much, and how sure that is.

The critical-difference diagram over problems (average ranks, Nemenyi's critical difference,
groups that do not differ), the normalised scores and the reference's probability of
improvement over each baseline with their intervals (scores.py), and the performance profile
(1 - ECDF) of every run's normalised score with its band (profiles.py). Built from `Summary`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from wdrbo_dist.analysis.figures import FigureItem, rgba, colour
from wdrbo_dist.analysis.ranking import CriticalDifference
from wdrbo_dist.analysis.summary_tables import Summary
from wdrbo_dist.analysis.names import algorithm_name, problem_name

LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=30, t=70, b=50))


def _p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else (f"{value:.2e}" if value < 1e-3 else f"{value:.3f}")


def cd_diagram(cd: CriticalDifference, order: list[str]) -> go.Figure:
    """Demšar's layout: ranks on a line (1 = best, left), the better half labelled on the left,
    the rest on the right, a thick bar under every group that does not differ, the CD on top."""
    fig = go.Figure()
    names = list(cd.average_ranks.index)
    k = len(names)
    half = math.ceil(k / 2)
    for i, algorithm in enumerate(names):
        rank = float(cd.average_ranks[algorithm])
        left = i < half
        depth = -(i + 1 if left else k - i) * 0.5 - 0.4
        end = 0.6 if left else k + 0.4
        label = f"{algorithm_name(algorithm)} ({rank:.2f})"
        fig.add_trace(go.Scatter(
            x=[rank, rank, end], y=[0, depth, depth], mode="lines+markers+text", name=algorithm_name(algorithm),
            line=dict(color=colour(algorithm, order), width=1.5), marker=dict(size=[8, 0, 0]),
            text=["", "", label], textposition="middle left" if left else "middle right", showlegend=False,
            hovertemplate=f"{algorithm_name(algorithm)}: average rank {rank:.3f}<extra></extra>"))
    for g, group in enumerate(cd.groups):
        ranks = [float(cd.average_ranks[a]) for a in group]
        y = -0.15 - 0.12 * g
        fig.add_trace(go.Scatter(
            x=[min(ranks) - 0.03, max(ranks) + 0.03], y=[y, y], mode="lines", showlegend=False,
            line=dict(color="black", width=5), name=f"group {g + 1}",
            hovertemplate=f"not different: {', '.join(algorithm_name(a) for a in group)}<extra></extra>"))
    if math.isfinite(cd.critical_difference):
        fig.add_trace(go.Scatter(
            x=[1, 1 + cd.critical_difference], y=[0.55, 0.55], mode="lines+text", showlegend=False,
            line=dict(color="black", width=2), text=[f"CD = {cd.critical_difference:.2f}", ""],
            textposition="top right", name="critical difference", hoverinfo="skip"))
    fig.update_xaxes(range=[0.4 - 0.1 * k, k + 0.6 + 0.1 * k], tickvals=list(range(1, k + 1)), side="top",
                     showgrid=False, zeroline=False, showline=True, linecolor="black", ticks="outside",
                     title_text="average rank (1 = lowest final cumulative regret)")
    fig.update_yaxes(visible=False, range=[-(half + 1) * 0.5 - 0.3, 0.9])
    verdict = ("differences exist" if cd.rejects else "no difference shown") if math.isfinite(cd.friedman_pvalue) else "not testable"
    fig.add_annotation(text=f"Friedman χ² = {cd.friedman_statistic:.3g}, p = {_p(cd.friedman_pvalue)} ({verdict}); "
                            f"N = {cd.n_blocks} problems (blocks), k = {k}; Nemenyi at α = {cd.alpha:g}",
                       xref="paper", yref="paper", x=0.0, y=0.0, xanchor="left", yanchor="top", showarrow=False)
    fig.update_layout(height=260 + 45 * half, **{**LAYOUT, "margin": dict(l=40, r=40, t=80, b=40)})
    return fig


def interval_figure(frame: pd.DataFrame, value: str, label_of: Callable[[str], str], colour_of: Callable[[str], str],
                    x_title: str,
                    lines: tuple[float, ...], x_range: tuple[float, float] | None = None) -> go.Figure:
    """One row per entity: the overall estimate with its interval (thick) and the per-problem
    estimates (small open markers), best on top."""
    overall = frame[frame["problem"] == "overall"].dropna(subset=[value]).sort_values(value)
    fig = go.Figure()
    for row in overall.itertuples():
        entity = row.entity
        name = label_of(entity)
        has = math.isfinite(row.low) and math.isfinite(row.high)
        interval = f"[{row.low:.3f}, {row.high:.3f}]" if has else "(n too small for an interval)"
        fig.add_trace(go.Scatter(
            x=[getattr(row, value)], y=[name], mode="markers", name=name, showlegend=False,
            marker=dict(color=colour_of(entity), size=11),
            error_x=dict(type="data", symmetric=False, array=[row.high - getattr(row, value) if has else 0.0],
                         arrayminus=[getattr(row, value) - row.low if has else 0.0], thickness=3, width=6),
            hovertemplate=f"{name}: %{{x:.3f}} {interval} over {row.n_problems} problems"
                          "<extra></extra>"))
        per = frame[(frame["entity"] == entity) & (frame["problem"] != "overall")].dropna(subset=[value])
        if len(per):
            fig.add_trace(go.Scatter(
                x=per[value], y=[name] * len(per), mode="markers", showlegend=False, name=f"{name} per problem",
                marker=dict(color=colour_of(entity), size=7, symbol="circle-open"),
                text=[problem_name(p) for p in per["problem"]],
                hovertemplate="%{text}: %{x:.3f}<extra></extra>"))
    for x in lines:
        fig.add_vline(x=x, line=dict(color="#888", dash="dash", width=1))
    fig.update_xaxes(title_text=x_title, zeroline=False, range=x_range)
    fig.update_layout(height=120 + 38 * max(1, len(overall)), **LAYOUT)
    return fig


def performance_profile(scores: pd.DataFrame, order: list[str], bands: pd.DataFrame | None = None) -> go.Figure:
    """Per algorithm, the share of its runs whose normalised score exceeds τ (1 - ECDF), with its
    bootstrap band (`profiles.profile_bands`) where one is given."""
    fig = go.Figure()
    for algorithm in order:
        values = np.sort(scores.loc[scores["algorithm"] == algorithm, "score"].dropna().to_numpy(dtype=float))
        if not values.size:
            continue
        c = colour(algorithm, order)
        band = bands[bands["algorithm"] == algorithm] if bands is not None and len(bands) else None
        if band is not None and len(band):
            fig.add_trace(go.Scatter(
                x=np.concatenate([band["tau"], band["tau"][::-1]]), y=np.concatenate([band["high"], band["low"][::-1]]),
                fill="toself", fillcolor=rgba(c, 0.15), line=dict(width=0), hoverinfo="skip", showlegend=False,
                legendgroup=algorithm, name=f"{algorithm_name(algorithm)} band"))
        share = 1.0 - np.arange(1, values.size + 1) / values.size
        fig.add_trace(go.Scatter(
            x=np.concatenate([[values[0]], values]), y=np.concatenate([[1.0], share]), mode="lines",
            line=dict(color=c, width=2, shape="hv"), name=algorithm_name(algorithm), legendgroup=algorithm,
            hovertemplate=f"{algorithm_name(algorithm)}: %{{y:.0%}} of {values.size} runs score above %{{x:.3f}}"
                          "<extra></extra>"))
    fig.add_vline(x=0.0, line=dict(color="#888", dash="dash", width=1))
    fig.update_xaxes(title_text="normalised score τ (1 = no regret, 0 = random search)")
    fig.update_yaxes(title_text="share of runs with score > τ", range=[-0.02, 1.02], tickformat=".0%")
    fig.update_layout(height=420, **LAYOUT)
    return fig


def summary_figures(summary: Summary, order: list[str]) -> list[FigureItem]:
    """The figures of `summary`, per fidelity, in reading order."""
    items = []
    for fidelity, cd in summary.critical_difference.items():
        if cd.n_blocks:
            items.append(FigureItem(
                f"critical_difference_{fidelity}", f"Critical-difference diagram — {fidelity}",
                "Average rank of each method over the problems (one block each: the methods ranked by their median "
                "final cumulative regret over seeds, 1 = lowest; problems where a method finished no seed are left "
                "out); a thick bar joins methods whose ranks Nemenyi's test cannot tell apart after a Friedman test, "
                "and the CD bar is the smallest rank gap it calls significant. Per-problem ranks over seeds are in "
                "the average-rank table.",
                cd_diagram(cd, order)))
        scores = summary.score_summary[summary.score_summary["fidelity"] == fidelity]
        if scores["score"].notna().any():
            items.append(FigureItem(
                f"normalised_scores_{fidelity}", f"Normalised scores — {fidelity}",
                "Normalised score 1 − R_T / R_T of random search on the same problem and seed, as a ratio of "
                "geometric means (1 = no regret, 0 = random search): the thick marker is 1 − exp of the "
                "interquartile mean over problems of the log-ratios with its 95 % t-interval (random search's "
                "uncertainty included), open circles are single problems.",
                interval_figure(scores.rename(columns={"algorithm": "entity"}), "score", algorithm_name,
                                lambda a: colour(a, order), "normalised score", (0.0, 1.0))))
        poi = summary.improvement[summary.improvement["fidelity"] == fidelity]
        if poi["probability"].notna().any():
            reference = algorithm_name(str(poi["reference"].iloc[0]))
            items.append(FigureItem(
                f"probability_of_improvement_{fidelity}", f"Probability of improvement of {reference} — {fidelity}",
                f"The probability that a {reference} run ends with less regret than the baseline's run on the same "
                "problem and seed (ties count ½), the mean over problems with its exact (Clopper-Pearson, "
                "conservative) 95 % interval; above 0.5 favours " + reference + ", open circles are single problems.",
                interval_figure(poi.rename(columns={"baseline": "entity"}), "probability",
                                lambda a: f"vs {algorithm_name(a)}", lambda a: colour(a, order),
                                f"P({reference} beats the baseline)", (0.5,), (-0.03, 1.03))))
        runs = summary.scores[summary.scores["fidelity"] == fidelity]
        if runs["score"].notna().any():
            items.append(FigureItem(
                f"score_profile_{fidelity}", f"Performance profile of normalised final scores — {fidelity}",
                "For each method, the share of its problem × seed runs whose normalised final score (1 − R_T / the "
                "geometric mean of random search's R_T) exceeds τ (one minus the ECDF): a curve above another "
                "everywhere is better on every quantile. Bands: pointwise 95 % bootstrap bands (seeds resampled "
                "within problems, random search's normaliser with them); their coverage is not checked, read them "
                "as indicative.",
                performance_profile(runs, order, summary.profiles.get(fidelity))))
    return items

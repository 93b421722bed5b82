"""The paper's figures (and a few more) as plotly figures built from the tidy frames.

Figures are returned, not written: the report decides how to embed them (one self-contained
page with plotly.js inline; there is no network where the dashboards are read).
Colours are fixed per algorithm so that every figure reads the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from wdrbo_dist.analysis.bands import curve_stats
from wdrbo_dist.analysis.load import FINISHED, LATE_STEPS, StudyData, late_regret
from wdrbo_dist.analysis.statistics import grouped_mean_se, mean_se, significant_digits_format
from wdrbo_dist.analysis.names import algorithm_name, problem_name

EXTRA_COLOURS = ("#17becf", "#bcbd22", "#393b79", "#637939")
MAIN_TEXT_ALGORITHMS = ("wdrbo", "erbo", "gp-ucb", "sbo-kde", "drbo-kde")  # the paper's Fig. 1
TOY = "toy-general"
GRID_COLUMNS = 4
TIME_COMPONENTS = (  # (label, colour): stacked bars of the time figure
    ("GP fit", "#4c72b0"), ("acquisition (excl. inner)", "#55a868"), ("inner solves", "#c44e52"),
    ("truth (QMC)", "#8172b2"), ("other", "#ccb974"),
)


@dataclass
class FigureItem:
    """One figure of the report: a file stem, a title, what it shows, and the figure."""

    key: str
    title: str
    caption: str
    figure: go.Figure


def colour(algorithm: str, order: Sequence[str] = ()) -> str:
    """The colour the algorithm's class declares, else one of EXTRA_COLOURS by its position."""
    from wdrbo_dist.acquisition.registry import ALGORITHMS

    declared = ALGORITHMS[algorithm].colour if algorithm in ALGORITHMS else None
    if declared:
        return declared
    index = list(order).index(algorithm) if algorithm in order else len(algorithm)
    return EXTRA_COLOURS[index % len(EXTRA_COLOURS)]


def rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _grid(titles: Sequence[str], columns: int = GRID_COLUMNS, row_height: int = 300, **kwargs: object) -> tuple[go.Figure, int]:
    n = max(1, len(titles))
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles) or [""],
                        horizontal_spacing=0.06, vertical_spacing=min(0.12, 0.35 / rows), **kwargs)
    fig.update_layout(height=max(360, row_height * rows + 80), template="plotly_white",
                      margin=dict(l=60, r=20, t=60, b=50))
    return fig, cols


def _position(index: int, cols: int) -> tuple[int, int]:
    return index // cols + 1, index % cols + 1


def _note(fig: go.Figure, row: int, col: int, text: str) -> None:
    """Say why a panel is empty instead of leaving it blank."""
    fig.add_trace(go.Scatter(x=[0.5], y=[0.5], mode="text", text=[text], showlegend=False, hoverinfo="skip"),
                  row=row, col=col)


def _band(fig: go.Figure, stats: pd.DataFrame, x: str, algorithm: str, order: Sequence[str],
          row: int, col: int, show_legend: bool) -> None:
    """The median over seeds with its distribution-free 95 % band (`bands.curve_stats`; none with
    fewer than 5 seeds); the hover also gives the mean ± SE and the seed count."""
    c = colour(algorithm, order)
    stats = stats.sort_values(x)
    xs = stats[x].to_numpy()
    centre = stats["median"].to_numpy(dtype=float)
    low, high = stats["low"].to_numpy(dtype=float), stats["high"].to_numpy(dtype=float)
    shown = np.isfinite(low) & np.isfinite(high)
    name = algorithm_name(algorithm)
    if shown.any():
        fig.add_trace(go.Scatter(
            x=np.concatenate([xs[shown], xs[shown][::-1]]), y=np.concatenate([high[shown], low[shown][::-1]]),
            fill="toself", fillcolor=rgba(c, 0.18), line=dict(width=0), hoverinfo="skip",
            showlegend=False, legendgroup=algorithm, name=name,
        ), row=row, col=col)
    band = np.array([f"[{lo:.4g}, {hi:.4g}]" if ok else "n too small (< 5 seeds)"
                     for lo, hi, ok in zip(low, high, shown)], dtype=object)
    fig.add_trace(go.Scatter(
        x=xs, y=centre, mode="lines", line=dict(color=c, width=2), name=name, legendgroup=algorithm,
        showlegend=show_legend,
        customdata=np.stack([stats["mean"].to_numpy(), np.nan_to_num(stats["se"].to_numpy(dtype=float)),
                             stats["n"].to_numpy(), band], axis=-1),
        hovertemplate=f"{name}<br>%{{x}}: median %{{y:.4g}}, 95 % interval %{{customdata[3]}}; mean "
                      "%{customdata[0]:.4g} ± %{customdata[1]:.2g} SE (n=%{customdata[2]})<extra></extra>",
    ), row=row, col=col)


def curve_figure(data: StudyData, fidelity: str, value: str, algorithms: Sequence[str],
                 problems: Sequence[str], y_title: str) -> go.Figure:
    """A grid with one panel per problem: the median over seeds of `value` against the step, with
    its band."""
    steps = data.steps[(data.steps["fidelity"] == fidelity) & data.steps["algorithm"].isin(algorithms)
                       & data.steps["problem"].isin(problems)]
    stats = curve_stats(steps, ["problem", "algorithm", "step"], value)
    fig, cols = _grid([problem_name(p) for p in problems])
    shown: set[str] = set()
    for i, problem in enumerate(problems):
        row, col = _position(i, cols)
        sub = stats[stats["problem"] == problem]
        if sub.empty:
            _note(fig, row, col, "no finished runs")
            continue
        for algorithm in algorithms:
            curve = sub[sub["algorithm"] == algorithm]
            if curve.empty:
                continue
            _band(fig, curve, "step", algorithm, data.algorithms, row, col, algorithm not in shown)
            shown.add(algorithm)
        fig.update_xaxes(title_text="evaluation t", row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text=y_title, row=row, col=col)
    return fig


def _data_problems(data: StudyData) -> list[str]:
    return [p for p in data.problems if p != TOY]


def cumulative_regret_items(data: StudyData, fidelity: str) -> list[FigureItem]:
    """Figs. 1-2: cumulative regret per problem; Fig. 1 only with the main-text methods."""
    problems = _data_problems(data)
    if not problems:
        return []
    items = []
    main = [a for a in data.algorithms if a in MAIN_TEXT_ALGORITHMS]
    if main and len(main) < len(data.algorithms):
        items.append(FigureItem(
            f"fig1_cumulative_regret_main_{fidelity}", f"Cumulative regret, main-text methods (Fig. 1) — {fidelity}",
            "Median over seeds of the cumulative expected regret R_t = Σ_{s≤t} r_s with its distribution-free 95 % "
            "band (none below 5 seeds), "
            "for the methods of the paper's main text. Lower is better; a curve that flattens has stopped paying regret.",
            curve_figure(data, fidelity, "cumulative_regret", main, problems, "cumulative regret R_t"),
        ))
    items.append(FigureItem(
        f"fig2_cumulative_regret_{fidelity}", f"Cumulative regret, all methods (Fig. 2) — {fidelity}",
        "Median over seeds of the cumulative expected regret, with its distribution-free 95 % band, for every "
        "method of the study "
        "(the paper's appendix Fig. 2). Lower is better.",
        curve_figure(data, fidelity, "cumulative_regret", data.algorithms, problems, "cumulative regret R_t"),
    ))
    items.append(FigureItem(
        f"fig3_instantaneous_regret_{fidelity}", f"Instantaneous regret (Fig. 3) — {fidelity}",
        "Median over seeds (distribution-free 95 % band) of the instantaneous expected regret r_t = E*[f(x*)] − E*[f(x_t)] "
        "(the paper's Fig. 3): how good the point chosen at step t is under the true context distribution. "
        "It shows the asymptotic behaviour that the cumulative curves smooth out.",
        curve_figure(data, fidelity, "regret", data.algorithms, problems, "instantaneous regret r_t"),
    ))
    return items


# --- the general-setting toy (method §4.9) ------------------------------------------------------------


def _argmaxes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """All grid maximisers (f is even in x: both ±x* are shown)."""
    top = np.nanmax(y)
    return x[np.isclose(y, top, rtol=0, atol=1e-9 * max(1.0, abs(top)))]


def toy_measured(steps: pd.DataFrame, last: int = LATE_STEPS) -> dict[str, tuple[float, float, int]]:
    """Per algorithm: (mean, SE over seeds, seeds) of the mean instantaneous regret over each
    run's last `last` evaluations: what a method pays per step once it has settled."""
    out = {}
    for algorithm, sub in steps.groupby("algorithm"):
        late = sub.sort_values("step").groupby("seed")["regret"].apply(late_regret, last=last)
        summary = mean_se(late.to_numpy())
        out[str(algorithm)] = (summary.mean, summary.se, int(late.size))
    return out


def toy_item(data: StudyData, fidelity: str) -> FigureItem | None:
    """f with its optima under P̂ and P*, and WDRBO vs ERBO cumulative regret (paper Fig. a, b)."""
    if TOY not in data.problems:
        return None
    from wdrbo_dist.problems import make_problem

    curves = make_problem(TOY, fidelity).landscape()
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09, subplot_titles=[
        "f(x, c)", "E f(x) under P̂ (centre) and P* (true)", "Cumulative regret"])
    x, c = curves["x"], curves["c"]
    fig.add_trace(go.Heatmap(x=x, y=c, z=curves["f"], colorscale="Viridis", showscale=True,
                             colorbar=dict(x=0.27, len=0.9, thickness=10), name="f(x, c)",
                             hovertemplate="x=%{x:.3f}<br>c=%{y:.3f}<br>f=%{z:.3f}<extra></extra>"), row=1, col=1)
    lines = (("e_centre", "E_P̂ f (ERBO's target)", "#1f77b4", "dash"),
             ("e_true", "E_P* f (truth)", "#000000", "solid"),
             ("robust", f"E_P̂ f − ε·L(x), ε={curves['radius']:g} (WDRBO's target)", "#d62728", "dot"))
    for key, label, col_hex, dash in lines:
        y = curves[key]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=label, line=dict(color=col_hex, dash=dash),
                                 legendgroup=key), row=1, col=2)
        best = _argmaxes(x, y)
        fig.add_trace(go.Scatter(x=best, y=np.interp(best, x, y), mode="markers", showlegend=False,
                                 legendgroup=key, marker=dict(color=col_hex, size=9, symbol="star"),
                                 hovertemplate=f"argmax of {label}: x=%{{x:.4f}}<extra></extra>"), row=1, col=2)
        for xb in best:
            fig.add_trace(go.Scatter(x=[xb, xb], y=[c[0], c[-1]], mode="lines", showlegend=False,
                                     legendgroup=key, line=dict(color=col_hex, dash=dash, width=1.5),
                                     hoverinfo="skip"), row=1, col=1)
    steps = data.steps[(data.steps["fidelity"] == fidelity) & (data.steps["problem"] == TOY)]
    shown = False
    for algorithm in ("wdrbo", "erbo"):
        sub = steps[steps["algorithm"] == algorithm]
        if sub.empty:
            continue
        stats = curve_stats(sub, ["step"], "cumulative_regret")
        _band(fig, stats, "step", algorithm, data.algorithms, 1, 3, True)
        shown = True
    if not shown:
        _note(fig, 1, 3, "no finished WDRBO / ERBO runs")
    measured = toy_measured(steps[steps["algorithm"].isin(["wdrbo", "erbo"])])
    truth = curves["e_true"]
    centre_choice = float(np.interp(0.0, x, truth))  # ERBO's target x = 0 under P*
    measured_text = "; ".join(
        f"{algorithm_name(a)}: "
        f"{significant_digits_format(m, se)} per step over the last {LATE_STEPS} evaluations ({n} seeds)"
        for a, (m, se, n) in measured.items()
    )
    fig.update_xaxes(title_text="x", row=1, col=1)
    fig.update_yaxes(title_text="c", row=1, col=1)
    fig.update_xaxes(title_text="x", row=1, col=2)
    fig.update_xaxes(title_text="evaluation t", row=1, col=3)
    fig.update_layout(height=430, template="plotly_white", margin=dict(l=60, r=20, t=80, b=50),
                      legend=dict(orientation="h", y=-0.2, x=0))
    return FigureItem(
        f"toy_general_{fidelity}", f"General setting (toy) — {fidelity}",
        "Left: f(x, c) = 1 − |c − 0.5|/(|x| + 0.2) − √(|x| + 0.05), with the maximisers of the curves in the "
        "middle panel as vertical lines. Middle: the expectation of f under the ambiguity centre P̂ = N(0.5, 0.1²) "
        "(what ERBO maximises), under the true P* = N(0.6, 0.2²), and WDRBO's robust objective "
        "E_P̂ f − ε·L(x) with L the Lipschitz constant of f in c; stars mark the maximisers. "
        "Right: median cumulative regret of WDRBO and ERBO with its distribution-free 95 % band. The analytic picture: ERBO's "
        f"target x = 0 pays {curves['optimal_value'] - centre_choice:.3f} per step under P*, WDRBO's target almost "
        "nothing. Measured in this study (instantaneous regret, mean ± SE over seeds): "
        + (measured_text or "no finished runs") + ".",
        fig,
    )


# --- time ----------------------------------------------------------------------------------------


def time_item(data: StudyData, fidelity: str) -> FigureItem:
    """Stacked mean seconds per run by component, with the SE of the total as an error bar."""
    runs = data.runs[(data.runs["fidelity"] == fidelity) & (data.runs["status"] == FINISHED)].copy()
    runs["acq_other"] = (runs["time_acquisition_s"] - runs["inner_solve_s"]).clip(lower=0)
    runs["other"] = (runs["wall_time_s"] - runs["time_fit_s"] - runs["time_acquisition_s"]
                     - runs["time_truth_s"]).clip(lower=0)
    parts = ("time_fit_s", "acq_other", "inner_solve_s", "time_truth_s", "other")
    problems = list(data.problems)
    fig, cols = _grid([problem_name(p) for p in problems])
    fig.update_layout(barmode="stack")
    for i, problem in enumerate(problems):
        row, col = _position(i, cols)
        sub = runs[runs["problem"] == problem]
        algorithms = [a for a in data.algorithms if a in set(sub["algorithm"])]
        if not algorithms:
            _note(fig, row, col, "no finished runs")
            continue
        names = [algorithm_name(a) for a in algorithms]
        for (label, hex_colour), part in zip(TIME_COMPONENTS, parts):
            means = [float(sub.loc[sub["algorithm"] == a, part].mean()) for a in algorithms]
            fig.add_trace(go.Bar(x=names, y=means, name=label, marker_color=hex_colour, legendgroup=label,
                                 showlegend=i == 0, hovertemplate=f"{label}: %{{y:.3g}} s<extra></extra>"),
                          row=row, col=col)
        totals = [mean_se(sub.loc[sub["algorithm"] == a, "wall_time_s"]) for a in algorithms]
        fig.add_trace(go.Scatter(
            x=names, y=[t.mean for t in totals], mode="markers", name="total (mean ± SE)",
            legendgroup="total", showlegend=i == 0, marker=dict(color="black", size=6),
            error_y=dict(type="data", array=[0.0 if math.isnan(t.se) else t.se for t in totals], visible=True),
            hovertemplate="total: %{y:.3g} s<extra></extra>"), row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text="seconds per run", row=row, col=col)
    return FigureItem(
        f"time_per_run_{fidelity}", f"Time per run — {fidelity}",
        "Mean wall-clock seconds per run (the paper's Tables 1-2), stacked by component: GP fitting, "
        "acquisition maximisation (without its inner convex solves), the inner solves of DRBO-KDE / DRBO-MMD, "
        "the QMC truth evaluation (book-keeping, not algorithm time) and the rest. The black marker is the "
        "mean total with its standard error.",
        fig,
    )


def regret_vs_time_item(data: StudyData, fidelity: str) -> FigureItem | None:
    """Mean cumulative regret against mean elapsed wall-clock time (log scale)."""
    problems = _data_problems(data) or list(data.problems)
    steps = data.steps[data.steps["fidelity"] == fidelity]
    if steps.empty:
        return None
    regret = grouped_mean_se(steps, ["problem", "algorithm", "step"], "cumulative_regret")
    elapsed = grouped_mean_se(steps, ["problem", "algorithm", "step"], "elapsed_s")
    merged = regret.merge(elapsed[["problem", "algorithm", "step", "mean"]].rename(columns={"mean": "elapsed"}),
                          on=["problem", "algorithm", "step"])
    fig, cols = _grid([problem_name(p) for p in problems])
    shown: set[str] = set()
    for i, problem in enumerate(problems):
        row, col = _position(i, cols)
        sub = merged[merged["problem"] == problem]
        if sub.empty:
            _note(fig, row, col, "no finished runs")
            continue
        for algorithm in data.algorithms:
            curve = sub[sub["algorithm"] == algorithm].sort_values("elapsed")
            if curve.empty:
                continue
            name = algorithm_name(algorithm)
            fig.add_trace(go.Scatter(
                x=curve["elapsed"], y=curve["mean"], mode="lines", name=name, legendgroup=algorithm,
                showlegend=algorithm not in shown, line=dict(color=colour(algorithm, data.algorithms), width=2),
                customdata=curve["step"], hovertemplate=f"{name}<br>t=%{{customdata}}: %{{x:.3g}} s, R=%{{y:.4g}}<extra></extra>",
            ), row=row, col=col)
            shown.add(algorithm)
        fig.update_xaxes(type="log", title_text="elapsed seconds (mean)", row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text="cumulative regret R_t", row=row, col=col)
    return FigureItem(
        f"regret_vs_time_{fidelity}", f"Regret against wall-clock time — {fidelity}",
        "Mean cumulative regret against the mean elapsed wall-clock time of a run (log scale): which method "
        "reaches a given regret soonest when time, not evaluations, is the budget. Each point is one "
        "evaluation t; the curves end where the runs end.",
        fig,
    )


def fidelity_item(data: StudyData) -> FigureItem | None:
    """The two fidelity profiles side by side (rows: problems; columns: paper, reference)."""
    if len(data.fidelities) < 2:
        return None
    fidelities = list(data.fidelities)[:2]
    problems = [p for p in data.problems
                if all(((data.runs["problem"] == p) & (data.runs["fidelity"] == f)).any() for f in fidelities)]
    if not problems:
        return None
    titles = [f"{problem_name(p)} — {f}" for p in problems for f in fidelities]
    fig = make_subplots(rows=len(problems), cols=2, shared_yaxes=True, subplot_titles=titles,
                        horizontal_spacing=0.04, vertical_spacing=min(0.08, 0.3 / len(problems)))
    stats = curve_stats(data.steps, ["fidelity", "problem", "algorithm", "step"], "cumulative_regret")
    shown: set[str] = set()
    for i, problem in enumerate(problems):
        for j, fidelity in enumerate(fidelities):
            sub = stats[(stats["problem"] == problem) & (stats["fidelity"] == fidelity)]
            if sub.empty:
                _note(fig, i + 1, j + 1, "no finished runs")
                continue
            for algorithm in data.algorithms:
                curve = sub[sub["algorithm"] == algorithm]
                if not curve.empty:
                    _band(fig, curve, "step", algorithm, data.algorithms, i + 1, j + 1, algorithm not in shown)
                    shown.add(algorithm)
        fig.update_yaxes(title_text="R_t", row=i + 1, col=1)
    fig.update_layout(height=260 * len(problems) + 100, template="plotly_white", margin=dict(l=60, r=20, t=60, b=50))
    return FigureItem(
        "fidelity_profiles", "Fidelity profiles side by side",
        f"Cumulative regret (median, distribution-free 95 % band) of the same study in the `{fidelities[0]}` and `{fidelities[1]}` profiles, "
        "one row per problem with a shared y axis: how much the reference code's faults (method §8) change "
        "each method's curve.",
        fig,
    )


def build_figures(data: StudyData) -> list[FigureItem]:
    """Every figure the study's data supports, in reading order."""
    items: list[FigureItem] = []
    for fidelity in data.fidelities:
        items += cumulative_regret_items(data, fidelity)
        toy = toy_item(data, fidelity)
        if toy is not None:
            items.append(toy)
        items.append(time_item(data, fidelity))
        vs_time = regret_vs_time_item(data, fidelity)
        if vs_time is not None:
            items.append(vs_time)
    both = fidelity_item(data)
    if both is not None:
        items.append(both)
    return items

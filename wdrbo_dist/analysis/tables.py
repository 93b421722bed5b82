"""Summary tables built from the tidy run frame: numbers (for CSV) and display text (markdown).

Every table keeps one row or cell per expected (fidelity, problem, algorithm), and says how
many of its runs finished, failed or are missing: nothing is dropped silently. A cell with no
finished run shows its status instead of a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from wdrbo_dist.analysis.load import CELL, FAILED, FINISHED, MISSING, StudyData
from wdrbo_dist.analysis.names import REFERENCE_ALGORITHM, algorithm_name, problem_name, resolve_reference
from wdrbo_dist.analysis.paired_tests import WILCOXON_TITLE, wilcoxon_display, wilcoxon_long
from wdrbo_dist.analysis.statistics import average_ranks, mean_se, significant_digits_format


# --- cell status -----------------------------------------------------------------------------------


def cell_counts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (fidelity, problem, algorithm): expected, finished, failed and missing run counts."""
    counts = (
        runs.assign(n=1)
        .pivot_table(index=CELL, columns="status", values="n", aggfunc="sum", fill_value=0, observed=True)
        .reindex(columns=[FINISHED, FAILED, MISSING], fill_value=0)
    )
    counts.columns = ["n_finished", "n_failed", "n_missing"]
    counts.insert(0, "n_expected", counts.sum(axis=1))
    return counts.astype(int).reset_index()


def status_note(n_expected: int, n_finished: int, n_failed: int, n_missing: int) -> str:
    """'' for a complete cell, else e.g. '13/15; 1 failed, 1 missing'."""
    if n_finished == n_expected:
        return ""
    parts = [f"{n} {label}" for n, label in ((n_failed, "failed"), (n_missing, "missing")) if n]
    return f"{n_finished}/{n_expected}; " + ", ".join(parts)


def cell_text(mean: float, se: float, counts: pd.Series) -> str:
    """'mean ± se', with the status of incomplete cells appended, or the status alone."""
    n_exp, n_fin = int(counts["n_expected"]), int(counts["n_finished"])
    n_fail, n_miss = int(counts["n_failed"]), int(counts["n_missing"])
    if n_fin == 0:
        if n_fail and not n_miss:
            return f"FAILED ({n_fail}/{n_exp})"
        if n_miss and not n_fail:
            return f"MISSING ({n_miss}/{n_exp})"
        return f"NO RUNS ({n_fail} failed, {n_miss} missing)"
    note = status_note(n_exp, n_fin, n_fail, n_miss)
    text = significant_digits_format(mean, se)
    return f"{text} [{note}]" if note else text


# --- final cumulative regret -------------------------------------------------------------------------


def _cell_mean_se(runs: pd.DataFrame, value: str, prefix: str) -> pd.DataFrame:
    rows = []
    for key, group in runs.groupby(CELL, sort=False, observed=True):
        finished = group.loc[group["status"] == FINISHED, value]
        stat = mean_se(finished)
        rows.append({**dict(zip(CELL, key)), f"{prefix}_mean": stat.mean, f"{prefix}_se": stat.se})
    return pd.DataFrame(rows, columns=[*CELL, f"{prefix}_mean", f"{prefix}_se"])


def final_regret_long(data: StudyData) -> pd.DataFrame:
    """Per cell: run counts and mean ± SE over seeds of the final cumulative regret."""
    counts = cell_counts(data.runs)
    stats = _cell_mean_se(data.runs, "final_cumulative_regret", "final_cumulative_regret")
    return counts.merge(stats, on=CELL, how="left")


def _ordered_wide(long: pd.DataFrame, text: pd.Series, data: StudyData, fidelity: str) -> pd.DataFrame:
    frame = long.assign(text=text)
    frame = frame[frame["fidelity"] == fidelity]
    wide = frame.pivot(index="problem", columns="algorithm", values="text")
    wide = wide.reindex(index=[p for p in data.problems if p in wide.index],
                        columns=[a for a in data.algorithms if a in wide.columns])
    wide = wide.fillna("— (not in study)")
    wide.index = [problem_name(p) for p in wide.index]
    wide.columns = [algorithm_name(a) for a in wide.columns]
    wide.index.name = "problem"
    return wide


def final_regret_wide(data: StudyData, long: pd.DataFrame, fidelity: str) -> pd.DataFrame:
    """The main table: problems x algorithms, 'mean ± SE' of the final cumulative regret."""
    text = long.apply(
        lambda r: cell_text(r["final_cumulative_regret_mean"], r["final_cumulative_regret_se"], r), axis=1
    )
    return _ordered_wide(long, text, data, fidelity)


# --- time (the paper's Tables 1-2) ----------------------------------------------------------------------

TIME_PARTS = {
    "wall_time_s": "total",
    "algorithm_s": "fit + acquisition",
    "time_fit_s": "GP fit",
    "time_acquisition_s": "acquisition",
    "inner_solve_s": "of which inner solves",
    "time_truth_s": "truth (QMC, book-keeping)",
    "other_s": "other",
}


def time_long(data: StudyData) -> pd.DataFrame:
    """Per cell: mean ± SE seconds per run, total and split (fit / acquisition / inner / truth)."""
    runs = data.runs.copy()
    runs["algorithm_s"] = runs["time_fit_s"] + runs["time_acquisition_s"]
    runs["other_s"] = (runs["wall_time_s"] - runs["algorithm_s"] - runs["time_truth_s"]).clip(lower=0.0)
    out = cell_counts(runs)
    for column in TIME_PARTS:
        out = out.merge(_cell_mean_se(runs, column, column.removesuffix("_s") + "_s"), on=CELL, how="left")
    return out


def time_wide(data: StudyData, long: pd.DataFrame, fidelity: str) -> pd.DataFrame:
    """The paper's layout: algorithms x problems, total seconds per run as mean ± SE."""
    text = long.apply(lambda r: cell_text(r["wall_time_s_mean"], r["wall_time_s_se"], r), axis=1)
    return _ordered_wide(long, text, data, fidelity).T.rename_axis("algorithm")


def time_split(data: StudyData, long: pd.DataFrame, fidelity: str) -> pd.DataFrame:
    """Rows problem x algorithm, one column per time component (mean ± SE seconds)."""
    frame = long[long["fidelity"] == fidelity]
    rows = []
    for problem in data.problems:
        for algorithm in data.algorithms:
            match = frame[(frame["problem"] == problem) & (frame["algorithm"] == algorithm)]
            if match.empty:
                continue
            r = match.iloc[0]
            row = {"problem": problem_name(problem), "algorithm": algorithm_name(algorithm),
                   "runs": status_note(int(r["n_expected"]), int(r["n_finished"]), int(r["n_failed"]),
                                       int(r["n_missing"])) or f"{int(r['n_finished'])}/{int(r['n_expected'])}"}
            for column, label in TIME_PARTS.items():
                row[label] = (significant_digits_format(r[f"{column}_mean"], r[f"{column}_se"])
                              if r["n_finished"] else "—")
            rows.append(row)
    return pd.DataFrame(rows).set_index(["problem", "algorithm"]) if rows else pd.DataFrame()


# --- ranks ---------------------------------------------------------------------------------------------


def rank_long(data: StudyData) -> pd.DataFrame:
    """Average rank (1 = lowest final cumulative regret) per problem, and overall.

    Per problem, each seed is a block: the algorithms are ranked within it (ties averaged) and
    the ranks averaged over the seeds where every algorithm finished (n_blocks; incomplete
    seeds are not ranked). Overall: the mean of an algorithm's per-problem average ranks over
    the problems that have at least one complete block (n_problems).
    """
    rows = []
    for fidelity in data.fidelities:
        runs = data.runs[(data.runs["fidelity"] == fidelity)]
        per_problem: dict[str, pd.Series] = {}
        for problem in data.problems:
            sub = runs[runs["problem"] == problem]
            if sub.empty:
                continue
            matrix = sub.pivot(index="seed", columns="algorithm", values="final_cumulative_regret")
            matrix = matrix.reindex(columns=[a for a in data.algorithms if a in matrix.columns])
            ranks, n_blocks = average_ranks(matrix)
            per_problem[problem] = ranks
            for algorithm, value in ranks.items():
                rows.append({"fidelity": fidelity, "problem": problem, "algorithm": algorithm,
                             "average_rank": float(value), "n_blocks": n_blocks, "n_seeds": len(matrix)})
        if per_problem:
            table = pd.DataFrame(per_problem).T  # problems x algorithms
            for algorithm in table.columns:
                column = table[algorithm].dropna()
                rows.append({"fidelity": fidelity, "problem": "overall", "algorithm": algorithm,
                             "average_rank": float(column.mean()) if len(column) else math.nan,
                             "n_blocks": int(len(column)), "n_seeds": int(len(table))})
    return pd.DataFrame(rows, columns=["fidelity", "problem", "algorithm", "average_rank", "n_blocks", "n_seeds"])


def rank_wide(data: StudyData, long: pd.DataFrame, fidelity: str) -> pd.DataFrame:
    """Problems (+ overall) x algorithms; rows without complete blocks say so."""
    frame = long[long["fidelity"] == fidelity]
    rows = {}
    for problem in [*data.problems, "overall"]:
        sub = frame[frame["problem"] == problem]
        if sub.empty:
            continue
        n_blocks, n_seeds = int(sub["n_blocks"].iloc[0]), int(sub["n_seeds"].iloc[0])
        unit = "problems" if problem == "overall" else "complete seeds"
        row = {algorithm_name(r.algorithm): ("n/a" if not math.isfinite(r.average_rank) else f"{r.average_rank:.2f}")
               for r in sub.itertuples()}
        row["based on"] = f"{n_blocks}/{n_seeds} {unit}"
        rows["Overall" if problem == "overall" else problem_name(problem)] = row
    wide = pd.DataFrame.from_dict(rows, orient="index")
    wide.index.name = "problem"
    return wide


# --- failures ------------------------------------------------------------------------------------------


def problems_list(data: StudyData) -> pd.DataFrame:
    """Every failed or missing run, with the last line of its error."""
    bad = data.runs[data.runs["status"] != FINISHED]
    return bad[[*CELL, "seed", "status", "label", "run_key", "error"]].reset_index(drop=True)


# --- rendering -----------------------------------------------------------------------------------------


def _escape_md(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured markdown table (no `tabulate` dependency)."""
    note = frame.attrs.get("note", "")
    if frame.empty:
        return f"{note}\n" if note else "_(no rows)_\n"
    flat = frame.reset_index() if index else frame
    header = [_escape_md(c) for c in flat.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in flat.itertuples(index=False):
        lines.append("| " + " | ".join(_escape_md(v) for v in row) + " |")
    return "\n".join(lines) + "\n" + (f"\n{note}\n" if note else "")


@dataclass
class Tables:
    """All summary tables of a study: long frames for CSV, display frames per fidelity."""

    final_regret: pd.DataFrame
    time: pd.DataFrame
    ranks: pd.DataFrame
    wilcoxon: pd.DataFrame
    problems: pd.DataFrame
    display: dict[str, dict[str, pd.DataFrame]]  # fidelity -> title -> display frame
    reference: str | None = REFERENCE_ALGORITHM  # None: the study lacks it
    reference_note: str = ""  # the line shown instead when it does

    def csv_frames(self) -> dict[str, pd.DataFrame]:
        return {
            "final_cumulative_regret": self.final_regret,
            "time_per_run": self.time,
            "average_ranks": self.ranks,
            "wilcoxon": self.wilcoxon,
            "failed_or_missing_runs": self.problems,
        }


MAIN_TITLE = "Final cumulative regret (mean ± SE over seeds)"
DISPLAY_FILES = ("final_cumulative_regret", "average_ranks", "wilcoxon", "time_per_run", "time_split")


def build_tables(data: StudyData, reference: str | None = None) -> Tables:
    """Every table of `data`; `reference` (default REFERENCE_ALGORITHM) is the method tested
    against each baseline, and a study without it gets one line saying so instead."""
    label, note = resolve_reference(data.algorithms, reference)
    final = final_regret_long(data)
    time = time_long(data)
    ranks = rank_long(data)
    tests = wilcoxon_long(data, reference=label)
    display: dict[str, dict[str, pd.DataFrame]] = {}
    for fidelity in data.fidelities:
        display[fidelity] = {
            MAIN_TITLE: final_regret_wide(data, final, fidelity),
            "Average rank (1 = lowest final cumulative regret)": rank_wide(data, ranks, fidelity),
            WILCOXON_TITLE.format(reference=algorithm_name(label) if label else "A reference method"):
                wilcoxon_display(tests, fidelity) if label else _only_note(note),
            "Time per run in seconds (mean ± SE; the paper's Tables 1-2)": time_wide(data, time, fidelity),
            "Time per run split by component (seconds, mean ± SE)": time_split(data, time, fidelity),
        }
    return Tables(final, time, ranks, tests, problems_list(data), display, label, note)


def _only_note(note: str) -> pd.DataFrame:
    """An empty display frame that shows `note` where its table would be."""
    frame = pd.DataFrame()
    frame.attrs["note"] = note
    return frame


def markdown_report(data: StudyData, tables: Tables, fidelities: Sequence[str] | None = None, lead: str = "") -> str:
    """All display tables as one markdown document; `lead` (markdown sections) goes first."""
    counts = data.counts()
    lines = [
        f"# Study `{data.name}`",
        "",
        f"Metric: {data.metric.description}.",
        f"Runs: {counts['expected']} expected, {counts['finished']} finished, "
        f"{counts['failed']} failed, {counts['missing']} missing.",
        "",
    ] + ([tables.reference_note, ""] if tables.reference_note else []) + ([lead] if lead else [])
    for fidelity in fidelities or data.fidelities:
        for title, frame in tables.display[fidelity].items():
            lines += [f"## {title} — fidelity `{fidelity}`", "", to_markdown(frame)]
    lines += ["## Failed or missing runs", ""]
    problems = tables.problems
    if problems.empty:
        lines.append("None: every expected run finished.\n")
    else:
        lines.append(to_markdown(problems[["label", "fidelity", "status", "error"]], index=False))
    return "\n".join(lines)

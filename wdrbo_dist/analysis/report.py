"""The study report: tables and figures on disk, one self-contained HTML page, MLflow copies.

Under `dashboards/<study>/`: index.html (the dashboard, plotly.js inline: no network),
summary.md (every table as markdown), tables/<name>.csv (long format, one row per cell or
test), figures/<name>.json (plotly's JSON: plotly.io.read_json reopens it).

MLflow: `aggregate_cells` computes what one aggregate run per problem x algorithm holds (the
per-step mean and standard error across seeds, so the MLflow UI can overlay algorithms);
`mlflow_report.log_report` logs them and the page. This module only writes files.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.io as pio
from plotly.offline import get_plotlyjs

from wdrbo_dist.analysis.figures import FigureItem, build_figures, fidelity_item
from wdrbo_dist.analysis.figures_summary import summary_figures
from wdrbo_dist.analysis.load import FAILED, FINISHED, MISSING, StudyData
from wdrbo_dist.analysis.names import algorithm_name
from wdrbo_dist.analysis.statistics import grouped_mean_se
from wdrbo_dist.analysis.summary_tables import Summary, build_summary, summary_markdown
from wdrbo_dist import __version__
from wdrbo_dist.analysis.tables import DISPLAY_FILES, MAIN_TITLE, Tables, build_tables, markdown_report, to_markdown

MAX_LISTED_PROBLEMS = 200  # failed/missing runs listed on the page (all of them are in the CSV)


@dataclass
class ReportFiles:
    """Where a summary or report was written."""

    folder: Path
    summary: Path
    tables: list[Path]
    figures: list[Path]
    page: Path | None = None


def study_folder(dashboards: Path, name: str) -> Path:
    """`dashboards/name`; ValueError unless `name` is one plain folder name, so that nothing a
    stored file says (an absolute path, `..`) takes the output out of `dashboards`."""
    if (not name or name in (".", "..") or "/" in name or "\0" in name
            or len(name.encode("utf-8", "surrogatepass")) > 255):
        raise ValueError(f"{name[:80]!r} is not a folder name (1 to 255 bytes, no / or NUL, not . or ..)")
    return Path(dashboards) / name


def main_table_text(data: StudyData, tables: Tables) -> str:
    """The table `summarize` and `report` print: final cumulative regret per fidelity of the
    study itself (not of a study a comparison draws beside it)."""
    data = data.first_study()
    counts = data.counts()
    parts = [f"Study {data.name}: {data.metric.description}.",
             f"Runs: {counts['expected']} expected, {counts['finished']} finished, "
             f"{counts['failed']} failed, {counts['missing']} missing."]
    parts += [tables.reference_note] if tables.reference_note else []
    for fidelity in data.fidelities:
        parts += ["", f"{MAIN_TITLE}, fidelity {fidelity}:", to_markdown(tables.display[fidelity][MAIN_TITLE])]
    return "\n".join(parts)


def write_tables(data: StudyData, tables: Tables, folder: Path, summary: Summary) -> tuple[Path, list[Path]]:
    """CSV (numbers) and markdown (display) files; returns the markdown path and the CSVs."""
    table_dir = folder / "tables"
    table_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in (tables.csv_frames() | summary.csv_frames()).items():
        path = table_dir / f"{name}.csv"
        frame.to_csv(path, index=False)
        written.append(path)
    for fidelity, display in tables.display.items():
        for stem, (title, frame) in zip(DISPLAY_FILES, display.items()):
            path = table_dir / f"{stem}_{fidelity}.md"
            path.write_text(f"# {title} — fidelity {fidelity}\n\n{to_markdown(frame)}")
            written.append(path)
    summary_path = folder / "summary.md"
    summary_path.write_text(markdown_report(data, tables, lead=summary_markdown(summary, data.fidelities)))
    return summary_path, written


def summarize(data: StudyData, folder: Path, summary: Summary | None = None,
              reference: str | None = None) -> tuple[Tables, ReportFiles]:
    """Compute and write the tables (no figures) of the study loaded first (`first_study`);
    `reference` is the method the others are tested against (default: WDRBO)."""
    data = data.first_study()
    tables = build_tables(data, reference)
    summary_path, written = write_tables(data, tables, folder, summary or build_summary(data, reference))
    return tables, ReportFiles(folder=folder, summary=summary_path, tables=written, figures=[])


# --- HTML ------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1rem 2rem;color:#222}
h1{margin-bottom:.2rem} h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}
.meta{color:#555} .caption{color:#444;max-width:70rem}
table{border-collapse:collapse;margin:.6rem 0 1.2rem;font-size:.88rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right;white-space:nowrap}
th{background:#f3f3f3} td.label{text-align:left;font-weight:600}
td.failed{background:#fde2e2} td.missing{background:#fff3cd} td.partial{background:#fff8e6}
nav a{margin-right:1rem} .figure{margin:1rem 0 2rem} code{background:#f3f3f3;padding:0 .2rem}
"""


def _cell_class(text: str) -> str:
    if text.startswith(("FAILED", "NO RUNS")) or text == "failed":
        return "failed"
    if text.startswith("MISSING") or text == "missing":
        return "missing"
    if "failed" in text or "missing" in text:
        return "partial"
    return ""


def html_table(frame: pd.DataFrame, index: bool = True, limit: int | None = None) -> str:
    """A plain HTML table; cells of failed or missing runs are coloured, never left out. The
    note a display frame carries (`attrs["note"]`) follows it."""
    note = frame.attrs.get("note", "")
    after = f'<p class="caption">{html.escape(note)}</p>' if note else ""
    if frame.empty:
        return after or "<p><em>(no rows)</em></p>"
    flat = frame.reset_index() if index else frame
    n_index = frame.index.nlevels if index else 0
    shown = flat if limit is None else flat.head(limit)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in flat.columns)
    body = []
    for row in shown.itertuples(index=False):
        cells = []
        for j, value in enumerate(row):
            text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
            cls = "label" if j < n_index else _cell_class(text)
            cells.append(f'<td class="{cls}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if limit is not None and len(flat) > limit:
        more = f"<p><em>… and {len(flat) - limit} more (all in the CSV).</em></p>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}{after}"


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def _figure_html(item: FigureItem) -> str:
    div = pio.to_html(item.figure, full_html=False, include_plotlyjs=False, div_id=f"fig-{_slug(item.key)}",
                      config={"responsive": True, "displaylogo": False})
    return (f'<div class="figure" id="{_slug(item.key)}"><h3>{html.escape(item.title)}</h3>'
            f'<p class="caption">{html.escape(item.caption)}</p>{div}</div>')


def _tables_html(display: dict[str, dict[str, pd.DataFrame]]) -> str:
    return "".join(f"<h3>{html.escape(title)} — <code>{html.escape(fidelity)}</code></h3>{html_table(frame)}"
                   for fidelity, tables in display.items() for title, frame in tables.items())


def render_page(data: StudyData, tables: Tables, figures: Sequence[FigureItem], source: str = "",
                summary: Summary | None = None, lead: Sequence[FigureItem] = ()) -> str:
    """The dashboard as one HTML string with plotly.js inline: it opens with no network.

    It opens on `lead` (the summary figures: who wins, by how much, how sure) and the summary's
    tables, then the per-problem tables, then `figures`. The header is the first study's alone."""
    data = data.first_study()
    counts = data.counts()
    generated = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    nav = ['<a href="#summary">Summary</a>', '<a href="#claims">Claims</a>', '<a href="#tables">Tables</a>', '<a href="#figures">Figures</a>',
           '<a href="#runs">Failed / missing runs</a>']
    headline = _tables_html({f: summary.display(f) for f in data.fidelities}) if summary is not None else ""
    claims = (_tables_html({f: {"The paper's claims": summary.claims_display(f)} for f in data.fidelities})
              if summary is not None else "<p>No summary.</p>")
    problems = tables.problems
    if problems.empty:
        runs_html = "<p>None: every expected run finished.</p>"
    else:
        runs_html = html_table(problems[["label", "fidelity", "status", "error", "run_key"]], index=False,
                               limit=MAX_LISTED_PROBLEMS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>wdrbo-dist: {html.escape(data.name)}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>Study <code>{html.escape(data.name)}</code></h1>
<p class="meta">Fidelity: {html.escape(", ".join(data.fidelities))} · seeds: {len(data.seeds)} ·
metric: {html.escape(data.metric.description)}<br>
Runs: {counts['expected']} expected, {counts[FINISHED]} finished, {counts[FAILED]} failed, {counts[MISSING]} missing ·
generated {html.escape(generated)} by wdrbo-dist {__version__}{(' from ' + html.escape(source)) if source else ''}</p>
<nav>{' '.join(nav)}</nav>
<h2 id="summary">Summary: which method wins, by how much, how sure</h2>
<p class="caption">Every interval is chosen to hold 95 % at the seed counts studies run, as a simulation of
lognormal and heavy-tailed regrets checks (docs/results.md): t-intervals of paired log-ratios for the normalised
scores, exact Clopper-Pearson intervals for win rates, the exact interval a rank test inverts for ratios, and the
median's distribution-free band for the curves. Where the seeds allow none, the page says "n too small"; † marks a
conservative one. The normalised score is 1 − R_T / R_T of random search on the same problem (ratio of geometric
means): 1 = no regret, 0 = random search.</p>{_reference_html(tables)}
{''.join(_figure_html(item) for item in lead)}
{headline}
<h2 id="claims">Claims: the paper's, answered by this study</h2>
<p class="caption">Each claim of the paper whose cells this study holds: supported, contradicted or inconclusive at
this n, with its numbers and test (docs/results.md says why each threshold).</p>
{claims}
<h2 id="tables">Tables</h2>
<p class="caption">Mean ± standard error over seeds (SE = sample SD / √n). Cells with failed or missing runs are
coloured and say how many of the expected runs they average; a cell without any finished run shows its status.
Ranks: 1 = lowest final cumulative regret, averaged over seeds where every method finished. Tests: paired
two-sided Wilcoxon signed-rank on the log-ratios of the same seeds, Holm-corrected over all tests of a fidelity
profile; W/T/L counts seeds where {html.escape(_reference_name(tables))}'s regret is lower / equal / higher;
rank-biserial r &gt; 0 favours it.</p>
{_tables_html(tables.display)}
<h2 id="figures">Figures</h2>
{''.join(_figure_html(item) for item in figures)}
<h2 id="runs">Failed or missing runs</h2>
{runs_html}
</body></html>
"""


def _reference_name(tables: Tables) -> str:
    return algorithm_name(tables.reference) if tables.reference else "the reference method"


def _reference_html(tables: Tables) -> str:
    """The one line that says why nothing is compared against a reference, if nothing is."""
    return f'<p class="meta"><strong>{html.escape(tables.reference_note)}</strong></p>' if tables.reference_note else ""


def write_figures(figures: Sequence[FigureItem], folder: Path) -> list[Path]:
    fig_dir = folder / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for item in figures:
        path = fig_dir / f"{item.key}.json"
        path.write_text(pio.to_json(item.figure))
        paths.append(path)
    return paths


def build_report(data: StudyData, folder: Path, source: str = "",
                 reference: str | None = None) -> tuple[Tables, ReportFiles]:
    """Tables, figures and the page of the study loaded first, written under `folder`; the
    summary figures come first, and a study drawn beside it (the other profile) adds only its
    side-by-side figure."""
    own = data.first_study()
    summary = build_summary(own, reference)
    tables, files = summarize(own, folder, summary, reference)
    lead = summary_figures(summary, list(own.algorithms))
    beside = fidelity_item(data) if own is not data else None
    figures = build_figures(own) + ([beside] if beside is not None else [])
    files.figures = write_figures([*lead, *figures], folder)
    page = folder / "index.html"
    tmp = page.with_suffix(".html.tmp")
    tmp.write_text(render_page(own, tables, figures, source, summary, lead), encoding="utf-8")
    tmp.replace(page)
    files.page = page
    return tables, files


# --- what MLflow's aggregate runs hold ------------------------------------------------------------

STEP_VALUES = ("cumulative_regret", "regret", "elapsed_s")  # the curves an aggregate run holds


@dataclass
class AggregateCell:
    """What one aggregate run holds: a problem x algorithm's curves across seeds and summaries."""

    problem: str
    algorithm: str
    fidelity: str
    finished_seeds: list[int]
    expected: int
    curves: dict[str, list[tuple[int, float]]]  # metric -> [(step, value)]
    summary: dict[str, float]
    metric_description: str
    metric_column: str
    include_initial: bool


def aggregate_cells(data: StudyData, tables: Tables, fidelity: str) -> list[AggregateCell]:
    """One aggregate per problem x algorithm with runs: per-step mean / SE across seeds of
    `STEP_VALUES`, and run-level summaries (non-finite values are left out)."""
    from wdrbo_dist.analysis.statistics import mean_se

    cells = []
    ranks = tables.ranks
    for problem in data.problems:
        for algorithm in data.algorithms:
            runs = data.runs[(data.runs["fidelity"] == fidelity) & (data.runs["problem"] == problem)
                             & (data.runs["algorithm"] == algorithm)]
            if runs.empty:
                continue
            steps = data.steps[(data.steps["fidelity"] == fidelity) & (data.steps["problem"] == problem)
                               & (data.steps["algorithm"] == algorithm)]
            curves: dict[str, list[tuple[int, float]]] = {}
            summary: dict[str, float] = {}
            for column in STEP_VALUES if not steps.empty else ():
                stats = grouped_mean_se(steps, ["step"], column)
                for suffix in ("mean", "se"):
                    curves[f"{column}_{suffix}"] = [
                        (int(step), float(value)) for step, value in zip(stats["step"], stats[suffix])
                        if math.isfinite(value)
                    ]
                summary[f"{column}_n_seeds"] = float(stats["n"].min())
            finished = runs[runs["status"] == FINISHED]
            summary |= {
                "n_expected": float(len(runs)),
                "n_finished": float(len(finished)),
                "n_failed": float((runs["status"] == FAILED).sum()),
                "n_missing": float((runs["status"] == MISSING).sum()),
            }
            for column in ("final_cumulative_regret", "wall_time_s", "time_fit_s", "time_acquisition_s",
                           "inner_solve_s"):
                stat = mean_se(finished[column])
                summary[f"{column}_mean"], summary[f"{column}_se"] = stat.mean, stat.se
            match = ranks[(ranks["fidelity"] == fidelity) & (ranks["problem"] == problem)
                          & (ranks["algorithm"] == algorithm)]
            if len(match):
                summary["average_rank"] = float(match["average_rank"].iloc[0])
            seeds = sorted(int(s) for s in finished["seed"])
            cells.append(AggregateCell(
                problem=problem, algorithm=algorithm, fidelity=fidelity, finished_seeds=seeds,
                expected=len(runs), curves=curves,
                summary={k: v for k, v in summary.items() if math.isfinite(v)},
                metric_description=data.metric.description, metric_column=data.metric.column,
                include_initial=data.metric.include_initial,
            ))
    return cells

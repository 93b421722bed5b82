"""The dashboard opens in headless Chromium with every figure drawn and no console error.

Chromium is Debian's package; the fixture installs it with apt when it is missing and fails
(never skips) when it cannot, so CI cannot pass without this check having run.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.analysis.fakes import fill_store, make_study
from tests.support.chromium_cdp import ensure_chromium, load_page
from wdrbo_dist.analysis.load import load_study
from wdrbo_dist.analysis.report import build_report

PLOTS = "document.querySelectorAll('.js-plotly-plot').length"
DRAWN = (
    "Array.from(document.querySelectorAll('.js-plotly-plot')).filter("
    "d => d.querySelector('svg.main-svg') && d._fullData && d._fullData.length > 0).length"
)
TRACES = "document.querySelectorAll('.js-plotly-plot g.trace, .js-plotly-plot g.hm').length"
ORDER = "Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => d.id)"
CAPTIONS = ("Array.from(document.querySelectorAll('.figure')).filter(f => f.querySelector('.js-plotly-plot') "
            "&& f.querySelector('p.caption').textContent.trim().split(' ').length >= 12).length")
SUMMARY_FIRST = ("!!(document.getElementById('summary').compareDocumentPosition(document.getElementById('tables')) "
                 "& Node.DOCUMENT_POSITION_FOLLOWING) && !!(document.getElementById('fig-critical-difference-paper')"
                 ".compareDocumentPosition(document.querySelector('#tables ~ h3 + table, #tables ~ table'))"
                 " & Node.DOCUMENT_POSITION_FOLLOWING)")
CD_TRACES = "document.getElementById('fig-critical-difference-paper')._fullData.length"
BANDS = ("Array.from(document.querySelectorAll('#fig-fig2-cumulative-regret-paper path.js-fill'))"
         ".filter(p => (p.getAttribute('d') || '').length > 20).length")
SCORE_BARS = "document.querySelectorAll('#fig-normalised-scores-paper g.errorbar').length"


@pytest.fixture(scope="session")
def chromium() -> str:
    return ensure_chromium()


def regret_of(spec):
    if spec.algorithm == "gp-ucb" and spec.seed == 2:
        return "boom"
    if spec.algorithm == "erbo" and spec.seed == 3 and spec.problem == "newsvendor":
        return None
    base = {"wdrbo": 0.1, "erbo": 0.2, "gp-ucb": 0.3, "random": 0.5}[spec.algorithm]
    rng = np.random.default_rng(spec.seed)
    t = np.arange(spec.evaluations)
    return base * np.exp(-t / 8) + 0.02 * rng.random(spec.evaluations)


@pytest.mark.integration
def test_dashboard_renders_without_errors(chromium, tmp_path):
    study = make_study(tmp_path, ["ackley", "newsvendor", "toy-general"], ["wdrbo", "erbo", "gp-ucb", "random"],
                       [1, 2, 3, 4, 5, 6], evaluations=12, init_size=2)  # 5 seeds or more: a median band
    fill_store(study, regret_of)
    tables, files = build_report(load_study([study]), tmp_path / "dash")
    page = files.page.read_text()
    # Self-contained: no script, stylesheet, image or frame is fetched from anywhere (the
    # browser's request log below is the proof; this is the readable first check).
    assert not re.search(r"""<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*["']?(https?:)?//""", page)
    # The summary figures first; Fig. 1 (main-text methods) leaves out random search.
    assert [f.stem for f in files.figures[:4]] == [
        "critical_difference_paper", "normalised_scores_paper", "probability_of_improvement_paper",
        "score_profile_paper"]
    assert {f.stem for f in files.figures[4:]} == {
        "fig1_cumulative_regret_main_paper", "fig2_cumulative_regret_paper", "fig3_instantaneous_regret_paper",
        "toy_general_paper", "time_per_run_paper", "regret_vs_time_paper"}
    expected = len(files.figures)

    report = load_page(
        chromium, files.page.resolve().as_uri(), tmp_path / "profile",
        {"plots": PLOTS, "drawn": DRAWN, "traces": TRACES,
         "failed_cells": "document.querySelectorAll('td.failed, td.partial, td.missing').length",
         "order": ORDER, "captions": CAPTIONS, "summary_first": SUMMARY_FIRST, "cd_traces": CD_TRACES,
         "bands": BANDS, "score_bars": SCORE_BARS},
        ready_expression=f"document.readyState === 'complete' && ({DRAWN}) >= {expected}",
    )
    assert report.errors == []
    assert report.evaluations["plots"] == expected
    assert report.evaluations["drawn"] == expected
    assert report.evaluations["traces"] >= 3 * expected
    assert report.evaluations["failed_cells"] > 0  # failed / missing cells are marked on the page
    # The page opens on the answer: the CD diagram and the normalised scores, above every table.
    assert report.evaluations["order"][:2] == ["fig-critical-difference-paper", "fig-normalised-scores-paper"]
    assert report.evaluations["summary_first"] is True
    assert report.evaluations["captions"] == expected  # every figure says in a sentence what it shows
    # CD diagram: one line per method (4), a bar per group that does not differ (here none: WDRBO, ERBO,
    # GP-UCB and random differ pairwise only in part), and the CD bar.
    assert report.evaluations["cd_traces"] >= 4 + 1
    assert report.evaluations["bands"] == 4 * 2  # Fig. 2: a drawn median band per method and data problem
    assert report.evaluations["score_bars"] == 4, report.evaluations  # an interval per method
    assert all(url.startswith(("file://", "data:", "about:")) for url in report.requests), report.requests


@pytest.mark.integration
def test_the_browser_check_sees_errors(chromium, tmp_path):
    """The harness itself: a page with a console error and an exception must be reported."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('boom'); undefinedFunction();</script></body></html>")
    report = load_page(chromium, page.as_uri(), tmp_path / "profile", {"plots": PLOTS},
                       ready_expression="document.readyState === 'complete'")
    assert report.console_errors == ["boom"]
    assert len(report.exceptions) == 1 and "undefinedFunction" in report.exceptions[0]
    assert report.evaluations["plots"] == 0


@pytest.mark.integration
def test_comparison_page_renders_without_errors(chromium, tmp_path):
    from wdrbo_dist.analysis.comparison import write_comparison

    studies = []
    for name, scale in (("a", 1.0), ("b", 1.5)):
        study = make_study(tmp_path, ["ackley", "newsvendor"], ["wdrbo", "erbo", "random"], [1, 2, 3],
                           evaluations=8, init_size=2, name=name)
        fill_store(study, lambda spec, scale=scale: None if (r := regret_of(spec)) is None else scale * r)
        studies.append(load_study([study]))
    cells, files = write_comparison(*studies, tmp_path / "compare", ("a.yaml", "b.yaml"))
    report = load_page(
        chromium, files.page.resolve().as_uri(), tmp_path / "profile",
        {"drawn": DRAWN, "points": "document.getElementById('fig-ratio')._fullData.length",
         "rows": "document.querySelectorAll('table tbody tr').length"},
        ready_expression=f"document.readyState === 'complete' && ({DRAWN}) >= 1",
    )
    assert report.errors == []
    assert report.evaluations["drawn"] == 1
    assert report.evaluations["points"] == report.evaluations["rows"] == len(cells) == 6
    assert all(url.startswith(("file://", "data:", "about:")) for url in report.requests), report.requests

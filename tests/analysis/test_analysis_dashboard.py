"""The dashboard opens in headless Chromium with every figure drawn and no console error.

Chromium is Debian's package; the fixture installs it with apt when it is missing and fails
(never skips) when it cannot, so CI cannot pass without this check having run.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from analysis_fakes import fill_store, make_study
from tests.support.chromium_cdp import ensure_chromium, load_page
from wdrbo_dist.analysis.load import load_study
from wdrbo_dist.analysis.report import build_report

PLOTS = "document.querySelectorAll('.js-plotly-plot').length"
DRAWN = (
    "Array.from(document.querySelectorAll('.js-plotly-plot')).filter("
    "d => d.querySelector('svg.main-svg') && d._fullData && d._fullData.length > 0).length"
)
TRACES = "document.querySelectorAll('.js-plotly-plot g.trace, .js-plotly-plot g.hm').length"


@pytest.fixture(scope="session")
def chromium() -> str:
    return ensure_chromium()


def regret_of(spec):
    if spec.algorithm == "gp-ucb" and spec.seed == 2:
        return "boom"
    if spec.algorithm == "erbo" and spec.seed == 3 and spec.problem == "newsvendor":
        return None
    base = {"wdrbo": 0.1, "erbo": 0.2, "gp-ucb": 0.3}[spec.algorithm]
    rng = np.random.default_rng(spec.seed)
    t = np.arange(spec.evaluations)
    return base * np.exp(-t / 8) + 0.02 * rng.random(spec.evaluations)


@pytest.mark.integration
def test_dashboard_renders_without_errors(chromium, tmp_path):
    study = make_study(tmp_path, ["ackley", "newsvendor", "toy-general"], ["wdrbo", "erbo", "gp-ucb"],
                       [1, 2, 3], evaluations=12, init_size=2)
    fill_store(study, regret_of)
    tables, files = build_report(load_study([study]), tmp_path / "dash")
    page = files.page.read_text()
    # Self-contained: no script, stylesheet, image or frame is fetched from anywhere (the
    # browser's request log below is the proof; this is the readable first check).
    assert not re.search(r"""<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*["']?(https?:)?//""", page)
    # Fig. 1 is Fig. 2 when every method is a main-text one, so it is not repeated.
    assert {f.stem for f in files.figures} == {
        "fig2_cumulative_regret_paper", "fig3_instantaneous_regret_paper", "toy_general_paper",
        "time_per_run_paper", "regret_vs_time_paper"}
    expected = len(files.figures)

    report = load_page(
        chromium, files.page.resolve().as_uri(), tmp_path / "profile",
        {"plots": PLOTS, "drawn": DRAWN, "traces": TRACES,
         "failed_cells": "document.querySelectorAll('td.failed, td.partial, td.missing').length"},
        ready_expression=f"document.readyState === 'complete' && ({DRAWN}) >= {expected}",
    )
    assert report.errors == []
    assert report.evaluations["plots"] == expected
    assert report.evaluations["drawn"] == expected
    assert report.evaluations["traces"] >= 3 * expected
    assert report.evaluations["failed_cells"] > 0  # failed / missing cells are marked on the page
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

"""Every citation of the method names a section of docs/method.md that exists.

The code, the configs, README.md, docs/ and `wdrbo-dist list` cite the method as "method §N.M"
(several in a row: "method §3.6, §8.9"); a reader has only the repository, so each must resolve.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHOD = ROOT / "docs" / "method.md"
CITATION = re.compile(r"§(\d+(?:\.\d+)?)")
SOURCES = [*ROOT.glob("wdrbo_dist/**/*.py"), *ROOT.glob("configs/*.yaml"), ROOT / "README.md",
           *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("tests/**/*.py")]


def sections() -> set[str]:
    headings = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", METHOD.read_text(), flags=re.M)
    assert len(headings) == len(set(headings)), "a section number is used twice"
    return set(headings)


def cited(text: str) -> set[str]:
    return set(CITATION.findall(text))


def test_every_citation_resolves() -> None:
    known = sections()
    missing = sorted(f"{path.relative_to(ROOT)}: §{number}"
                     for path in SOURCES for number in cited(path.read_text()) - known)
    assert missing == []


def test_nothing_cites_a_document_the_user_does_not_have() -> None:
    stale = re.compile(r"\b[Ss]pec(?: section)? \d|\bProject decision \d")
    found = sorted(f"{path.relative_to(ROOT)}:{i}" for path in SOURCES
                   for i, line in enumerate(path.read_text().splitlines(), 1) if stale.search(line))
    assert found == []


def test_the_method_has_its_sections() -> None:
    """The algorithms, the problems, the metrics and the published faults each have their section."""
    known = sections()
    assert {"1.4", "1.6", "3.1", "3.8", "3.10", "4.1", "4.9", "5.1", "5.4", "8.1", "8.23", "9.1"} <= known


@pytest.mark.parametrize("command", [["list"]])
def test_the_command_line_cites_only_real_sections(command, capsys) -> None:
    from wdrbo_dist.cli import main

    assert main(command) == 0
    out = capsys.readouterr().out
    assert cited(out) and cited(out) <= sections()

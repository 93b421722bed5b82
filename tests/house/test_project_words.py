"""The project's text speaks of the project, not of how it is being made.

README.md, CHANGELOG.md, docs/ and the package's source are scanned for words that belong to the
making (numbered work periods, the machine of a given day, who ran what when). Each hit is
reported as file:line with the line, so that it can be reworded where it is.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Patterns for every scanned file. A pattern names a way of speaking, not a topic: "this machine"
# (the one a command runs on) and "VM" (what a figure was measured on) stay allowed.
EVERYWHERE = {
    "a numbered work period": re.compile(
        r"\bstop[ -]?\d+\b(?!\s*(?:s|ms|us|min|minutes?|seconds?|h|hours?|%)\b)", re.IGNORECASE),
    "a work period": re.compile(r"\bwork[ -]periods?\b", re.IGNORECASE),
    "the machine of a given day": re.compile(
        r"\b(?:this|that|the(?: (?:same|slower|faster|other|fresh|first|last|previous|next|AVX2|AVX-512))?)\s+VM\b"
        r"|\bthe \d{4}-\d{2}-\d{2} (?:machine|VM)\b"
        r"|\bmachines? of (?:that|the|this|a given) day\b"),
    "a time of the day of a measurement": re.compile(
        r"\b(?:this|that) (?:day|night|morning|afternoon|evening|hour)\b", re.IGNORECASE),
    "the old log's heading": re.compile(r"\bMeasured here\b"),
    "a commit one worked from": re.compile(r"\b(?:worktree|clone) of [0-9a-f]{7,40}\b"),
}
# Only in prose (Markdown): in code a session may be a library's (an HTTP or MLflow session).
PROSE_ONLY = {
    "a session": re.compile(r"\bsessions?\b", re.IGNORECASE),
}


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted((ROOT / "wdrbo_dist").rglob("*.py"))
    return [path for path in files if path.is_file()]


def hits(path: Path) -> list[str]:
    patterns = dict(EVERYWHERE)
    if path.suffix == ".md":
        patterns.update(PROSE_ONLY)
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for name, pattern in patterns.items():
            match = pattern.search(line)
            if match:
                found.append(f"{path.relative_to(ROOT)}:{number}: {name} ({match.group(0)!r}): {line.strip()}")
    return found


def test_the_scanned_files_exist():
    names = {path.name for path in scanned_files()}
    assert {"README.md", "CHANGELOG.md"} <= names
    assert any(path.suffix == ".py" for path in scanned_files())


def test_the_text_speaks_of_the_project_not_of_its_making():
    found = [hit for path in scanned_files() for hit in hits(path)]
    assert not found, "words about how the project is being made:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_name():
    text = {
        "Stop 43, measured on the same VM": 2,
        "as in stop-39's notes": 1,
        "the 2026-11-25 machine": 1,
        "measured that morning": 1,
        "### Measured here": 1,
        "in a fresh clone of 749aa33": 1,
    }
    for line, expected in text.items():
        count = sum(1 for pattern in EVERYWHERE.values() if pattern.search(line))
        assert count == expected, line
    assert PROSE_ONLY["a session"].search("the first sessions kept theirs")


def test_the_patterns_leave_the_projects_own_words_alone():
    allowed = [
        "the server stops in 2 s",
        "stop 2 s after the last run",
        "runs on this machine, in a pool of workers",
        "a 2-core AMD EPYC VM (AVX2), one thread per run",
        "the stopping rule's window",
        "the MLflow server stops answering",
    ]
    for line in allowed:
        for name, pattern in EVERYWHERE.items():
            assert not pattern.search(line), (name, line)

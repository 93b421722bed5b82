"""Comments and docstrings in wdrbo_dist say what and why: module docstrings of at most 10
lines, and no version numbers (the history of a route is in CHANGELOG.md, not in the code)."""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "wdrbo_dist"
FILES = sorted(PACKAGE.rglob("*.py"))
MODULE_DOCSTRING_LINES = 10
# x.y.z, not part of a longer dotted number (127.0.0.1)
VERSION = re.compile(r"(?<![\d.])\d+\.\d+\.\d+(?![\d.]*\d)")


def docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of the module's docstring and of every class's and function's."""
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    found = []
    for node in nodes:
        text = ast.get_docstring(node, clean=False)
        if text is not None:
            found.append((node.body[0].lineno, text))
    return found


def comments(source: str) -> list[tuple[int, str]]:
    return [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_docstring_is_at_most_ten_lines(path: Path) -> None:
    text = ast.get_docstring(ast.parse(path.read_text()))
    lines = len(inspect.cleandoc(text).splitlines()) if text else 0
    assert lines <= MODULE_DOCSTRING_LINES, f"{path.relative_to(PACKAGE)}: module docstring of {lines} lines"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_comment_or_docstring_quotes_a_version(path: Path) -> None:
    source = path.read_text()
    quoted = [f"{path.relative_to(PACKAGE)}:{line}: {match}"
              for line, text in docstrings(ast.parse(source)) + comments(source)
              for match in VERSION.findall(text)]
    assert not quoted, "version numbers in comments or docstrings:\n" + "\n".join(quoted)


def test_the_pattern_finds_versions_and_not_addresses() -> None:
    assert VERSION.findall("since 0.12.0, (0.10.0-0.11.0's route)") == ["0.12.0", "0.10.0", "0.11.0"]
    assert VERSION.findall("http://127.0.0.1:5000, 1.5e-3, 2.5x") == []

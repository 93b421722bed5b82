"""Exit codes are defined once (`ExitCode`): the README's table and `--help` show that enum."""

from __future__ import annotations

import re
from pathlib import Path

from wdrbo_dist.cli import build_parser
from wdrbo_dist.errors import ExitCode, one_line

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_is_the_enum() -> None:
    section = README.read_text().split("### Exit codes", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M))
    assert rows == {str(code.value): code.meaning for code in ExitCode}


def test_help_lists_every_exit_code() -> None:
    epilog = " ".join(build_parser().epilog.split())
    for code in ExitCode:
        assert f"{code:d} {code.meaning}" in epilog


def test_an_error_is_one_line_cut_to_a_readable_length() -> None:
    assert one_line(ValueError("a\n  b\tc")) == "a b c"
    assert one_line(ValueError("")) == "ValueError"
    assert one_line(KeyError("k"), named=True) == "KeyError: 'k'"
    long = one_line(RuntimeError("x" * 10_000))
    assert len(long) == 300 and long.endswith("...")
    assert one_line("y" * 50, 20) == "y" * 17 + "..."

"""What every command shares: the one-line usage error (exit 2), `--option KEY=VALUE`, and reading
a study from its YAML file or from the output folder it left."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wdrbo_dist.study.spec import StudySpec


class UsageError(Exception):
    """A bad argument or config value; reported as one line with exit code 2."""


def parse_option(text: str) -> tuple[str, bool | int | float | str]:
    """`key=value` with the value read as bool, int, float or string, in that order."""
    if "=" not in text:
        raise UsageError(f"--option must look like KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return key.strip(), lowered == "true"
    for cast in (int, float):
        try:
            return key.strip(), cast(raw)
        except ValueError:
            pass
    return key.strip(), raw


def read_study(path: str) -> "StudySpec":
    """A study config, or (for a folder) the study its output folder holds; a bad one is a `UsageError`."""
    from wdrbo_dist.analysis.folder_study import study_from_folder
    from wdrbo_dist.errors import one_line
    from wdrbo_dist.study.config import ConfigError, load_study_config

    try:
        return study_from_folder(path) if Path(path).is_dir() else load_study_config(path, validate_runs=False)
    except (ConfigError, ValueError) as exc:  # one line, however much a stored file held
        raise UsageError(f"{path}: {one_line(exc)}") from None

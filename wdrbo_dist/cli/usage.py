"""What every command shares: the one-line usage error (exit 2) and `--option KEY=VALUE`."""

from __future__ import annotations


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

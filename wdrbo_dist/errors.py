"""How a command ends: its exit code (one enum for the CLI, the driver and the README's table), and
the one line an error is shown as. Cross-cutting, so it belongs to no layer and imports nothing."""

from __future__ import annotations

import re
from enum import IntEnum


class ExitCode(IntEnum):
    """A command's exit status; each member's doc is the README's line for it."""

    OK = 0
    RUNS_FAILED = 1
    USAGE = 2
    UNAVAILABLE = 69  # sysexits.h's EX_UNAVAILABLE
    IO_ERROR = 74  # sysexits.h's EX_IOERR
    IN_USE = 75  # sysexits.h's EX_TEMPFAIL
    INTERRUPTED = 130  # 128 + SIGINT
    TERMINATED = 143  # 128 + SIGTERM

    @property
    def meaning(self) -> str:
        return MEANINGS[self]


MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "every run of the study finished",
    ExitCode.RUNS_FAILED: "some run failed (the summary names each, with the last line of its error)",
    ExitCode.USAGE: "bad config or argument, an unreachable tracking store or Ray address (checked before any run)",
    ExitCode.UNAVAILABLE: "runs lost to the infrastructure, or the cluster is gone: run the same command again",
    ExitCode.IO_ERROR: "the output folder could not be written during work (a full disk): free space, "
                       "run the same command again",
    ExitCode.IN_USE: "another driver holds the output folder: retry later",
    ExitCode.INTERRUPTED: "interrupted",
    ExitCode.TERMINATED: "terminated (SIGTERM, as Slurm, Kubernetes and `ray job stop` send): ended as Ctrl-C ends it",
}

LINE_LIMIT = 300  # characters: a message stays one readable line whatever the error carried
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s]*@")


def redact(text: str) -> str:
    """`text` with the `user:password@` of every URL in it shown as `***@`: for any message or file
    that quotes a URI (the config refuses credentials in one; a URL from elsewhere may hold them)."""
    return _USERINFO.sub(r"\1***@", text)


def one_line(error: BaseException | str, limit: int = LINE_LIMIT, *, named: bool = False) -> str:
    """`error` as one line: whitespace collapsed, cut to `limit` characters (marked with "..."),
    the exception's type when it says nothing, credentials in URLs hidden (`redact`); with `named`,
    "Type: message"."""
    text = redact(" ".join(str(error).split()))
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(error, BaseException) and (named or not text):
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text

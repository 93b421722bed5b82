"""Checksums of what the store writes, so that every byte it reads back is verified.

A run's meta JSON is sealed (`seal`): its `checksum` field is the SHA-256 of the rest of it, as
JSON with sorted keys, and `records_sha256` is that of its parquet file's bytes. A compaction
round's manifest names the SHA-256 of each file of the round. A file that does not match is
damaged: set aside and its runs done again, never served.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

CHECKSUM = "checksum"
RECORDS_CHECKSUM = "records_sha256"
Signature = tuple[int, int, int]  # inode, size, mtime (ns): a file unchanged since it was verified


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def signature(path: Path) -> Signature | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _canonical(payload: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in payload.items() if k != CHECKSUM}, sort_keys=True, default=str).encode()


def seal(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with its checksum (JSON round trips exactly: sorted keys, floats by repr)."""
    return {**payload, CHECKSUM: digest(_canonical(payload))}


def seal_problem(payload: dict[str, Any]) -> str:
    """Why a sealed JSON object read back is not what was written; "" when it is (or carries no
    seal: a file of an older layout, judged by its other checks)."""
    expected = payload.get(CHECKSUM)
    if expected is None:
        return ""
    if digest(_canonical(payload)) != expected:
        return "its checksum does not match its content"
    return ""


class VerifiedFiles:
    """The files found whole, by signature: a file is hashed again only once it has changed."""

    def __init__(self) -> None:
        self._whole: dict[Path, Signature] = {}

    def problem(self, path: Path, expected: str) -> str:
        """"" when `path` holds the bytes whose SHA-256 is `expected`; else what is wrong."""
        found = signature(path)
        if found is None:
            return "missing"
        if self._whole.get(path) == found:
            return ""
        try:
            actual = file_digest(path)
        except OSError as exc:
            return f"cannot be read ({exc.strerror or type(exc).__name__})"
        if actual != expected:
            return "its bytes do not match their checksum"
        self._whole[path] = found
        return ""

    def trust(self, path: Path, data_digest: str, data: bytes | None = None) -> None:
        """Remember a file this process just wrote (its digest computed from what it wrote)."""
        found = signature(path)
        if found is not None and (data is None or digest(data) == data_digest):
            self._whole[path] = found

    def forget(self, path: Path) -> None:
        self._whole.pop(path, None)

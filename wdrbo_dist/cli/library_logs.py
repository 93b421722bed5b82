"""Library chatter off the terminal: Ray's and MLflow's INFO and WARNING records go to a log
file that the command names at its end; their errors still show on stderr.

What a user can do nothing about (Ray's token-authentication notice, MLflow creating its
tables, Ray packaging the working folder) otherwise lands in the middle of the progress lines.
The libraries configure their loggers when first imported, so this imports them first.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LIBRARY_LOGGERS = ("ray", "mlflow", "alembic", "py.warnings")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _LazyFileHandler(logging.FileHandler):
    """Creates its folder and file with the first record: a command that logs nothing (or
    stops at bad input) leaves no trace."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, delay=True)

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def log_file(folder: Path, command: str) -> Path:
    return folder / "logs" / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}.log"


@contextlib.contextmanager
def library_logs_to(path: Path, imports: tuple[str, ...] = ("mlflow",)) -> Iterator[Path]:
    """Within the block, the libraries' records below ERROR go to `path` (created on the first)."""
    for module in imports:
        importlib.import_module(module)
    to_file = _LazyFileHandler(path)
    to_file.setFormatter(logging.Formatter(FORMAT))
    errors = logging.StreamHandler(sys.stderr)
    errors.setLevel(logging.ERROR)
    errors.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(to_file)
        logger.addHandler(errors)
        logger.propagate = False
    logging.captureWarnings(True)
    try:
        yield path
    finally:
        logging.captureWarnings(False)
        for logger, handlers, propagate in saved:
            logger.removeHandler(to_file)
            logger.removeHandler(errors)
            for handler in handlers:
                logger.addHandler(handler)
            logger.propagate = propagate
        to_file.close()


def mention(path: Path) -> None:
    """The closing line naming the log, when anything was written to it."""
    if path.is_file() and path.stat().st_size:
        print(f"library messages (Ray, MLflow): {path}", file=sys.stderr)

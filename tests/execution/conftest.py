"""Ray in these tests keeps token authentication on: one token per test process, in the
environment before Ray is imported (Ray's token loader keeps the first token it reads), so
nothing is written to ~/.ray and every Ray started here and its workers use it."""

from __future__ import annotations

import os
import secrets

os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))

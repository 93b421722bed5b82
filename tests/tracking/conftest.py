"""The session's PostgreSQL server (tests/support/postgres.py), started by the first test that
asks for it and stopped, its folder removed, when the session ends, failed tests or not."""

from __future__ import annotations

import pytest

from tests.support.postgres import Postgres, started_postgres


@pytest.fixture(scope="session")
def postgres() -> Postgres:
    with started_postgres() as server:
        yield server

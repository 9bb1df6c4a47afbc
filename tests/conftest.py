"""Shared fixtures: paths to the shipped examples and the real databases (SQLite, PostgreSQL).

PostgreSQL tests run when BURST_TEST_DATABASE_URL is set (CI sets it and sets
BURST_REQUIRE_POSTGRES=1, which turns a missing URL into a failure instead of a skip). Each test
gets a database of its own, created on that server and dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from burst import db

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def _postgres_server_url() -> str | None:
    url = os.environ.get("BURST_TEST_DATABASE_URL")
    if not url and os.environ.get("BURST_REQUIRE_POSTGRES") == "1":
        pytest.fail("BURST_REQUIRE_POSTGRES=1 but BURST_TEST_DATABASE_URL is not set")
    return url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the test server, dropped after the test."""
    server = _postgres_server_url()
    if not server:
        pytest.skip("PostgreSQL: set BURST_TEST_DATABASE_URL (CI does) to run this test")
    admin_url = db.resolve_url(server)
    name = f"burst_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'burst.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test that takes this runs once on SQLite and once on PostgreSQL."""
    return str(
        request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    )


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = db.make_engine(make_url(database_url))
    yield engine
    engine.dispose()

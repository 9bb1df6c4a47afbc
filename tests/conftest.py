"""Shared fixtures: paths to the shipped examples and the real databases (SQLite, PostgreSQL).

PostgreSQL tests run when BURST_TEST_DATABASE_URL is set (CI sets it and sets
BURST_REQUIRE_POSTGRES=1, which turns a missing URL into a failure instead of a skip). Each test
gets a database of its own, created on that server and dropped afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from burst.store import database

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


# The files that take longest, handed to the workers first (pyproject.toml keeps xdist from
# ordering files by their number of tests): with each file on one worker, the soak (three and a
# half minutes, most of it waiting on its `burst serve` processes) started last and ran alone at
# the end while the other worker sat idle.
LONGEST_FIRST = ("tests/soak/test_soak.py", "tests/test_static.py", "tests/e2e/test_compiled.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


def burst_cli(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m burst ARGS` in a process of its own, as a user runs it; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "burst", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


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
    admin_url = database.resolve_url(server)
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
    engine = database.make_engine(make_url(database_url))
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def sandbox_server() -> Iterator[Any]:
    """One sandbox cluster per test module, on a free port; pods run 0.2 s unless annotated, and
    a Job replaces a failed pod after 0.1 s, doubling to 1 s (Kubernetes' own Job tests shorten
    the backoff so: test/integration/job/job_test.go fastPodFailureBackoff)."""
    from burst.sandbox import Sandbox

    sandbox = Sandbox(
        tick=0.02, default_duration=0.2, bookmark_every=0.2, pod_failure_backoff=(0.1, 1.0)
    ).start()
    yield sandbox
    sandbox.stop()


@pytest.fixture
def sandbox(sandbox_server: Any) -> Any:
    """The module's sandbox, emptied for this test."""
    sandbox_server.reset()
    return sandbox_server


@pytest.fixture
def kube(sandbox: Any) -> Iterator[Any]:
    """An official-client ApiClient for the sandbox."""
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host=sandbox.url))
    yield api
    api.close()


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; its value, or AssertionError after `timeout` seconds
    (generous: a busy machine makes a wait longer, and only a failing test waits it out)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(every)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """A moto server on 127.0.0.1 (EKS, EC2) for the AWS tests of one module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()

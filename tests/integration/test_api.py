"""The HTTP API served for real (uvicorn on 127.0.0.1), read by a plain HTTP client."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import urllib3
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from burst.amounts import Money
from burst.money import ledger
from burst.service.api import create_app
from burst.store import database
from tests.ledger_scenario import build_ledger

TOKEN = "api-token-for-tests"


@contextmanager
def ledger_app(folder: Path) -> Iterator[Any]:
    """The API over the test ledger, with one budget, answering with TOKEN."""
    url = f"sqlite:///{folder / 'burst.db'}"
    build_ledger(url)
    engine = database.make_engine(url)
    budget = ledger.BudgetLimit(
        "cms-ml-monthly", "team", "cms-ml", Money.of("5000", "USD"), "month"
    )
    try:
        yield create_app(
            database.sessions(engine),
            token=TOKEN,
            budgets=[budget],
            now=lambda: datetime(2026, 11, 20, tzinfo=UTC),
        )
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ledger_app(tmp_path_factory.mktemp("api")) as app, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
        thread.join(5)


def get(url: str, path: str, token: str | None = TOKEN) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return urllib3.request("GET", url + path, headers=headers)


def test_probes_are_open(api_url: str) -> None:
    assert get(api_url, "/healthz", None).json() == {"status": "ok"}
    assert get(api_url, "/readyz", None).json() == {"status": "ready"}


def test_a_token_is_required(api_url: str) -> None:
    for path in ("/api/v1/pools", "/metrics", "/api/v1/ledger"):
        assert get(api_url, path, None).status == 401
        assert get(api_url, path, "wrong").status == 401
        assert get(api_url, path).status == 200


@pytest.mark.parametrize(
    "header", [TOKEN, f"Basic {TOKEN}", f"bearer{TOKEN}", f"Token {TOKEN}", f"Bearer  {TOKEN}"]
)
def test_the_token_counts_only_with_the_bearer_scheme(api_url: str, header: str) -> None:
    """The bare token was accepted (the scheme was stripped if present, not required)."""
    answer = urllib3.request("GET", api_url + "/api/v1/pools", headers={"Authorization": header})
    assert answer.status == 401


def test_openapi_is_published(api_url: str) -> None:
    spec = get(api_url, "/openapi.json", None).json()
    assert spec["info"]["title"] == "burst"
    assert {
        "/api/v1/workloads",
        "/api/v1/pools",
        "/api/v1/budgets",
        "/api/v1/ledger",
        "/api/v1/plan",
        "/metrics",
        "/healthz",
        "/readyz",
    } <= set(spec["paths"])


def test_metrics_parse_as_prometheus_text(api_url: str) -> None:
    families = {
        f.name: f for f in text_string_to_metric_families(get(api_url, "/metrics").data.decode())
    }
    assert {
        "burst_pools",
        "burst_spend_micros",
        "burst_budget_used_ratio",
        "burst_decision_seconds",
        "burst_provider_call_seconds",
        "burst_budget_alerts",
        "burst_spend_rate_micros_per_hour",
        "burst_pass_seconds",
        "burst_pass_statements",
        "burst_pending_workloads",
    } <= set(families)
    spend = {s.labels["team"]: s.value for s in families["burst_spend_micros"].samples}
    assert spend["cms-ml"] > 0
    used = next(s.value for s in families["burst_budget_used_ratio"].samples)
    assert 0 < used < 1


def test_read_only_resources(api_url: str) -> None:
    rows = get(api_url, "/api/v1/ledger?limit=5").json()
    assert len(rows) == 5 and all(r["amount"].endswith(" USD") for r in rows)
    budgets = get(api_url, "/api/v1/budgets").json()
    assert budgets[0]["name"] == "cms-ml-monthly" and budgets[0]["left"].endswith(" USD")
    assert get(api_url, "/api/v1/plan").json() == {"actions": [], "skips": []}
    assert (
        urllib3.request(
            "POST", api_url + "/api/v1/pools", headers={"Authorization": f"Bearer {TOKEN}"}
        ).status
        == 405
    )


def test_no_secret_in_the_answers(api_url: str, tmp_path: Path) -> None:
    assert TOKEN not in get(api_url, "/openapi.json", None).data.decode()
    assert TOKEN not in get(api_url, "/api/v1/pools", "wrong").data.decode()

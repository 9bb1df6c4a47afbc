"""Reports aggregated in the database: budgets as the service enforces them (their own period,
reservations), a forecast from the run rate, idle and overhead shared over the teams that caused
them, and rows that add up to the total."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from burst.amounts import Money
from burst.clock import FakeClock
from burst.money import ledger, report
from burst.store import database
from burst.store.tables import LedgerEntry
from tests.conftest import ROOT
from tests.ledger_scenario import build_ledger


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'burst.db'}"
    build_ledger(url)
    return database.sessions(database.make_engine(url))


def _posted(s, team: str, start: datetime, end: datetime) -> int:  # type: ignore[no-untyped-def]
    return int(
        s.scalar(
            select(func.sum(LedgerEntry.amount_micros)).where(
                LedgerEntry.team == team,
                LedgerEntry.period_start >= start,
                LedgerEntry.period_start < end,
            )
        )
        or 0
    )


def test_a_daily_budget_shows_its_day_not_the_month(sessions) -> None:  # type: ignore[no-untyped-def]
    """The budget table summed the report's period (the whole month) for a daily budget."""
    now = datetime(2026, 11, 5, 20, 0, tzinfo=UTC)  # the azure day of the scenario
    daily = ledger.BudgetLimit("cms-daily", "team", "cms-ml", Money.of("500", "USD"), "day")
    with sessions() as s:
        built = report.build(s, "2026-11", "team", "USD", {}, [daily], now=now)
        day = _posted(
            s, "cms-ml", datetime(2026, 11, 5, tzinfo=UTC), datetime(2026, 11, 6, tzinfo=UTC)
        )
        month = _posted(
            s, "cms-ml", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
        )
    (row,) = built.budgets
    assert 0 < day < month
    assert row.used == Money(day, "USD")  # not the month's
    assert row.left == Money.of("500", "USD") - Money(day, "USD")


def test_reservations_count_and_the_forecast_follows_the_run_rate(sessions, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monthly = ledger.BudgetLimit("cms-month", "team", "cms-ml", Money.of("5000", "USD"), "month")
    now = datetime(2026, 11, 10, tzinfo=UTC)
    with sessions() as s:
        before = report.build(s, "2026-11", "team", "USD", {}, [monthly], now=now).budgets[0]
        ledger.reserve(s, monthly, Money.of("7", "USD"), FakeClock(now), {})
        s.flush()
        after = report.build(s, "2026-11", "team", "USD", {}, [monthly], now=now).budgets[0]
        s.rollback()
    assert after.used - before.used == Money.of("7", "USD")
    # Spend of the last 7 days (3 to 10 November), at that rate for the 21 days left.
    with sessions() as s:
        week = _posted(s, "cms-ml", now - timedelta(days=7), now)
    rate = week / (7 * 86400)
    expected = before.used.micros + int(rate * 21 * 86400)
    assert abs(before.forecast.micros - expected) <= 1
    assert before.forecast != before.used  # it was always equal to spend so far


def test_sharing_idle_and_overhead_moves_them_to_the_teams_that_used_the_pools(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions() as s:
        plain = report.build(s, "2026-11", "team", "USD", {})
        shared = report.build(s, "2026-11", "team", "USD", {}, share=True)
    assert "ml-platform" in [r.key for r in plain.rows]
    assert "ml-platform" not in [r.key for r in shared.rows]  # every pool had a job
    assert shared.total == plain.total  # nothing lost, nothing made up
    assert sum((r.spend for r in shared.rows), Money.zero("USD")) == shared.total
    cms = next(r for r in shared.rows if r.key == "cms-ml")
    assert cms.overhead_share > 0 and cms.idle_share > 0
    with pytest.raises(report.PeriodError, match="by team"), sessions() as s:
        report.build(s, "2026-11", "provider", "USD", {}, share=True)


def test_dated_rates_keep_a_past_report_as_it_was(sessions, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rates had no date: editing one changed every past report. A report uses the rate of its
    period's start, and says which (with its source)."""
    from burst import config
    from burst.cloud import catalog

    text = (ROOT / "burst" / "data" / "demo" / "config.yaml").read_text()
    head = "spec:\n  installationId: burst-demo\n"
    assert head in text
    dated = """  usdExchangeRates:
    CHF:
      - {rate: "0.80", since: 2026-11-01, source: ECB reference rate}
      - {rate: "0.95", since: 2026-12-01, source: ECB reference rate}
"""
    (tmp_path / "c.yaml").write_text(text.replace(head, head + dated))
    shipped = catalog.shipped()
    cfg = config.load([tmp_path], config.Vocabulary(shipped.regions(), shipped.accelerators()))
    assert cfg.service is not None
    spec = cfg.service.spec
    november = datetime(2026, 11, 1, tzinfo=UTC)
    assert spec.usd_rates(november) == {"CHF": Decimal("0.80")}
    assert spec.usd_rates(datetime(2026, 12, 5, tzinfo=UTC)) == {"CHF": Decimal("0.95")}
    assert spec.usd_rates(datetime(2026, 10, 5, tzinfo=UTC)) == {}  # none yet: refused, not guessed
    assert spec.rate_notes(november) == {"CHF": "0.8 since 2026-11-01 (ECB reference rate)"}
    with sessions() as s:
        built = report.build(s, "2026-11", "team", "CHF", spec.usd_rates(november))
        in_usd = report.build(s, "2026-11", "team", "USD", {})
    assert built.total.micros == pytest.approx(in_usd.total.micros * 0.80, rel=1e-6)

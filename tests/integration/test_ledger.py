"""The ledger on SQLite and PostgreSQL: idempotent posting, corrections, budgets, concurrency."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from burst.amounts import CurrencyError, Money
from burst.clock import FakeClock
from burst.money import alerts, ledger
from burst.money.meter import Charge, PoolHistory, Use, meter
from burst.store import database
from burst.store.tables import BudgetReservation, LedgerEntry
from tests.builders import pool_row

T0 = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)
RATES = {"CHF": Decimal("0.80")}
CONTEXT = ledger.ChargeContext(
    pool_id=None,
    policy="ml",
    provider="aws",
    region="eu-central-1",
    namespaces={"w1": "cms-ml", "w2": "atlas-ml"},
    workload_ids={},
)


def charges() -> list:  # type: ignore[type-arg]
    history = PoolHistory(
        pool="p1",
        cloud="aws",
        team="ml-platform",
        policy="ml",
        unit_price_micros=12_000_000,
        currency="USD",
        price_source="catalog",
        gpus_per_node=4,
        created=T0,
        ready=T0 + timedelta(minutes=6),
        node_changes=((T0, 2),),
        deleted=T0 + timedelta(hours=3, minutes=10),
    )
    uses = [
        Use("w1", "cms", 4, T0 + timedelta(minutes=6), T0 + timedelta(hours=2)),
        Use("w2", "atlas", 2, T0 + timedelta(minutes=30), T0 + timedelta(hours=3)),
    ]
    return meter(history, uses, T0 + timedelta(hours=6))


@pytest.fixture
def sessions(engine: Engine):  # type: ignore[no-untyped-def]
    database.upgrade(engine)
    return database.sessions(engine)


def total(sessions) -> int:  # type: ignore[no-untyped-def]
    with sessions() as s:
        return int(s.scalar(select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0))))


def test_posting_is_idempotent_and_survives_a_crash_between_any_two_charges(sessions) -> None:  # type: ignore[no-untyped-def]
    clock, all_charges = FakeClock(), charges()
    expected = sum(c.amount_micros for c in all_charges)
    for crash_after in range(len(all_charges)):
        with (
            sessions.begin() as s
        ):  # a pass that died after posting some rows (its transaction committed)
            ledger.post(s, all_charges[:crash_after], CONTEXT, clock)
        with sessions.begin() as s:  # the next pass posts everything again
            ledger.post(s, all_charges, CONTEXT, clock)
        assert total(sessions) == expected
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(LedgerEntry)) == len(all_charges)
        cms = ledger.spent(s, "namespace", "cms-ml", T0, T0 + timedelta(days=1))
        assert cms == {"USD": sum(c.amount_micros for c in all_charges if c.workload == "w1")}


def test_a_correction_is_a_new_row_pointing_at_the_old(sessions) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    with sessions.begin() as s:
        ledger.post(s, charges(), CONTEXT, clock)
    before = total(sessions)
    with sessions.begin() as s:
        first = s.scalar(select(LedgerEntry).order_by(LedgerEntry.id))
        fix = ledger.correct(s, first.id, Money.of("-0.25", "USD"), "bill: discount", clock)
        again = ledger.correct(s, first.id, Money.of("-0.25", "USD"), "bill: discount", clock)
        assert fix.id == again.id and fix.corrects_id == first.id and fix.kind == "correction"
        with pytest.raises(CurrencyError):
            ledger.correct(s, first.id, Money.of("1", "EUR"), "x", clock)
    assert total(sessions) == before - 250_000


def test_sums_across_currencies_need_a_rate() -> None:
    assert ledger.convert({"USD": 8_000_000, "CHF": 1_000_000}, "CHF", RATES) == Money(
        7_400_000, "CHF"
    )
    with pytest.raises(CurrencyError, match="no exchange rate for EUR"):
        ledger.convert({"EUR": 1}, "USD", RATES)


def test_hard_budget_refuses_and_soft_budget_warns(sessions) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock(T0)
    hard = ledger.BudgetLimit("cms-month", "team", "cms", Money.of("10", "CHF"), "month")
    with sessions.begin() as s:
        ledger.reserve(s, hard, Money.of("10", "USD"), clock, RATES)  # 8.00 CHF
    with (
        pytest.raises(
            ledger.BudgetExceeded, match=r"budget cms-month: 2\.00 CHF left, needs 2\.40 CHF"
        ),
        sessions.begin() as s,
    ):
        ledger.reserve(s, hard, Money.of("3", "USD"), clock, RATES)
    soft = ledger.BudgetLimit("cms-soft", "team", "cms", Money.of("1", "USD"), "month", hard=False)
    with sessions.begin() as s:
        row = ledger.reserve(s, soft, Money.of("3", "USD"), clock, RATES)
        assert ledger.release(s, [row.id], clock) == 1 and ledger.release(s, [row.id], clock) == 0


def test_budget_counts_posted_spend_in_its_period(sessions) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock(T0 + timedelta(hours=6))
    with sessions.begin() as s:
        ledger.post(s, charges(), CONTEXT, clock)
    budget = ledger.BudgetLimit("cms-day", "team", "cms", Money.of("100", "USD"), "day")
    with sessions() as s:
        cms = sum(c.amount_micros for c in charges() if c.team == "cms")
        assert ledger.used(s, budget, clock.now(), RATES) == Money(cms, "USD")
        next_day = ledger.BudgetLimit("cms-day", "team", "cms", Money.of("100", "USD"), "day")
        assert ledger.used(s, next_day, clock.now() + timedelta(days=1), RATES) == Money(0, "USD")


def test_a_run_on_a_pool_another_policy_shares_is_spent_from_its_own_policys_budget(
    sessions,  # type: ignore[no-untyped-def]
) -> None:
    """w2, of policy viz, ran on a pool of policy ml (both share their pools): its usage is viz's
    spend; the pool's idle and overhead, and w1's usage, are ml's."""
    clock = FakeClock(T0 + timedelta(hours=6))
    with sessions.begin() as s:
        ledger.post(s, charges(), replace(CONTEXT, policies={"w1": "ml", "w2": "viz"}), clock)
    with sessions() as s:
        for policy, expected in (
            ("viz", [c for c in charges() if c.workload == "w2"]),
            ("ml", [c for c in charges() if c.workload != "w2"]),
        ):
            budget = ledger.BudgetLimit(policy, "policy", policy, Money.of("100", "USD"), "day")
            spent = sum(c.amount_micros for c in expected)
            assert spent and ledger.used(s, budget, clock.now(), RATES) == Money(spent, "USD")


def test_period_bounds() -> None:
    now = datetime(2026, 11, 18, 15, 30, tzinfo=UTC)  # a Wednesday
    assert ledger.period_bounds("day", now) == (
        datetime(2026, 11, 18, tzinfo=UTC),
        datetime(2026, 11, 19, tzinfo=UTC),
    )
    assert ledger.period_bounds("week", now) == (
        datetime(2026, 11, 16, tzinfo=UTC),
        datetime(2026, 11, 23, tzinfo=UTC),
    )
    assert ledger.period_bounds("month", now) == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 12, 1, tzinfo=UTC),
    )


def test_alert_thresholds() -> None:
    assert alerts.crossed(
        used_micros=85, amount_micros=100, thresholds=[50, 80, 100], before_micros=40
    ) == [50, 80]
    assert (
        alerts.crossed(
            used_micros=85, amount_micros=100, thresholds=[50, 80, 100], before_micros=85
        )
        == []
    )


@pytest.mark.postgres
@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"])
def test_sixteen_writers_never_exceed_a_hard_budget_on_postgres(
    postgres_url: str, isolation: str
) -> None:
    """The advisory lock was taken after the transaction's snapshot under REPEATABLE READ, so
    every writer read the budget as it was before the others: 16 of 16 got through. The budget's
    row is updated first now; a writer that loses the race is refused (SQLSTATE 40001) and tries
    again on fresh data, or waits and reads the winner's reservation."""
    engine = database.make_engine(postgres_url)
    database.upgrade(engine)
    sessions = database.sessions(engine.execution_options(isolation_level=isolation))
    budget = ledger.BudgetLimit("shared", "team", "cms", Money.of("10", "USD"), "month")
    clock = FakeClock(T0)
    start = threading.Barrier(16)
    outcomes: list[str] = []

    def writer() -> None:
        start.wait()
        for _ in range(50):
            try:
                with sessions.begin() as s:
                    ledger.used(s, budget, clock.now(), RATES)  # the snapshot starts here
                    ledger.reserve(s, budget, Money.of("3", "USD"), clock, RATES)
                outcomes.append("held")
                return
            except ledger.BudgetExceeded:
                outcomes.append("refused")
                return
            except OperationalError as exc:
                if getattr(exc.orig, "sqlstate", None) != "40001":
                    raise

    threads = [threading.Thread(target=writer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["held"] * 3 + ["refused"] * 13
    with sessions() as s:
        held = s.scalar(select(func.sum(BudgetReservation.amount_micros)))
    assert held == 9_000_000 <= 10_000_000
    engine.dispose()


def test_a_workloads_cost_so_far(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as s:
        ledger.post(s, charges(), CONTEXT, FakeClock())
    with sessions() as s:
        assert ledger.workload_cost(s, "w1") == {
            "USD": sum(c.amount_micros for c in charges() if c.workload == "w1")
        }
        assert ledger.workload_cost(s, "nobody") == {}


def test_budget_alerts_fire_once_per_threshold(sessions) -> None:  # type: ignore[no-untyped-def]
    from prometheus_client import REGISTRY

    clock = FakeClock(T0 + timedelta(hours=6))
    budget = ledger.BudgetLimit(
        "cms-alerts", "team", "cms", Money.of("100", "USD"), "month", hard=False
    )
    labels = {"budget": "cms-alerts", "threshold": "80"}
    fired_before = REGISTRY.get_sample_value("burst_budget_alerts_total", labels) or 0.0
    seen: dict[str, int] = {}
    with sessions() as s:
        assert alerts.budget_alerts(s, [(budget, [50, 80, 100])], clock.now(), RATES, seen) == []
    with sessions.begin() as s:
        ledger.reserve(s, budget, Money.of("85", "USD"), clock, RATES)
    with sessions() as s:
        fired = alerts.budget_alerts(s, [(budget, [50, 80, 100])], clock.now(), RATES, seen)
        assert [a.threshold for a in fired] == [50, 80]
        assert fired[1].message == "soft budget cms-alerts: 80% reached (85.00 USD of 100.00 USD)"
        assert alerts.budget_alerts(s, [(budget, [50, 80, 100])], clock.now(), RATES, seen) == []
    assert REGISTRY.get_sample_value("burst_budget_alerts_total", labels) == fired_before + 1


def test_budget_periods_follow_the_configured_time_zone() -> None:
    """Geneva's November starts at 23:00 UTC on 31 October; its day of the October change to
    winter time is 25 hours long."""
    now = datetime(2026, 11, 1, 0, 30, tzinfo=UTC)  # 01:30 on 1 November in Geneva
    assert ledger.period_bounds("month", now, "Europe/Zurich") == (
        datetime(2026, 10, 31, 23, 0, tzinfo=UTC),
        datetime(2026, 11, 30, 23, 0, tzinfo=UTC),
    )
    start, end = ledger.period_bounds(
        "day", datetime(2026, 10, 25, 12, tzinfo=UTC), "Europe/Zurich"
    )
    assert end - start == timedelta(hours=25)
    assert ledger.period_bounds("month", now) == (  # UTC unless told
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 12, 1, tzinfo=UTC),
    )


def _pool(s, name: str) -> int:  # type: ignore[no-untyped-def]
    row = pool_row(name=name, created_at=T0, updated_at=T0)
    s.add(row)
    s.flush()
    return int(row.id)


def test_a_workload_run_twice_has_each_charge_counted_once_against_its_budget(sessions) -> None:  # type: ignore[no-untyped-def]
    """A run reclaimed on pool A and sent again to pool B: the charges of the first run, posted
    when A's hour closes, are spent once, not also taken off B's reservation (the soak's hard
    budget ended 0.9 % over with the workload's charges taken off both)."""
    from burst.store.tables import Workload

    budget = ledger.BudgetLimit("theory-day", "namespace", "theory", Money.of("10", "USD"), "day")
    with sessions.begin() as s:
        w = Workload(
            uid="w1",
            kind="Job",
            namespace="theory",
            name="train",
            team="theory",
            policy="ml",
            gpus_per_pod=1,
            created_at=T0,
            updated_at=T0,
        )
        s.add(w)
        s.flush()
        a, b = _pool(s, "a"), _pool(s, "b")
        clock = FakeClock(T0 + timedelta(minutes=5))
        ledger.reserve(s, budget, Money.of("3", "USD"), clock, RATES, pool_id=a, workload_id=w.id)
        clock.advance(timedelta(minutes=25))  # reclaimed at 08:20, sent again at 08:30
        ledger.reserve(s, budget, Money.of("3", "USD"), clock, RATES, pool_id=b, workload_id=w.id)
        context = ledger.ChargeContext(a, "ml", "aws", "eu-central-1", {"w1": "theory"}, {})
        run = Charge(
            "a:8:usage:w1", "a", "usage", "w1", "theory", T0, T0 + timedelta(hours=1),
            1200, 2_000_000, "USD", 1_000_000, "catalog",
        )  # fmt: skip
        clock.advance(timedelta(minutes=31))  # A's hour closes: the first run is posted
        ledger.post(s, [run], context, clock)
    with sessions() as s:
        # Spent 2 USD; A's reservation holds 1 more, B's all of its 3.
        assert ledger.used(s, budget, clock.now(), RATES) == Money.of("6", "USD")

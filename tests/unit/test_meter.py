"""Metering: each cloud's billing rule, attribution, and the invariants the ledger relies on."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from burst.money.meter import BILLING, BillingRule, PoolHistory, Use, instances, meter

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def pool(
    changes: list[tuple[int, int]],
    *,
    ready: int | None = 0,
    deleted: int | None = None,
    cloud: str = "aws",
    price: int = 3_060_000,
    gpus: int = 1,
) -> PoolHistory:
    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    return PoolHistory(
        pool="p",
        cloud=cloud,
        team="ml-platform",
        policy="ml",  # type: ignore[arg-type]
        unit_price_micros=price,
        currency="USD",
        price_source="catalog",
        gpus_per_node=gpus,
        created=T0,
        ready=at(ready) if ready is not None else None,
        node_changes=tuple((at(s), n) for s, n in changes),
        deleted=at(deleted) if deleted is not None else None,
    )


def test_billing_rules() -> None:
    assert BILLING["aws"].billable(10) == 60 and BILLING["aws"].billable(61.2) == 62
    assert BILLING["gcp"].billable(59) == 60
    assert BILLING["azure"].billable(61) == 120 and BILLING["azure"].billable(3600) == 3600


def test_an_hour_of_one_node_costs_its_hourly_price() -> None:
    charges = meter(
        pool([(0, 1)], deleted=3600),
        [Use("w", "cms", 1, T0, T0 + timedelta(hours=1))],
        until=T0 + timedelta(hours=3),
    )
    assert [(c.kind, c.workload, c.gpu_seconds, c.amount_micros) for c in charges] == [
        ("usage", "w", 3600, 3_060_000)
    ]


def test_provisioning_is_overhead_and_the_tail_is_idle() -> None:
    # Node starts at 0, ready at 10 min, the job runs 10-40 min, the pool goes at 50 min.
    history = pool([(0, 1)], ready=600, deleted=3000)
    charges = meter(
        history,
        [Use("w", "cms", 1, T0 + timedelta(minutes=10), T0 + timedelta(minutes=40))],
        until=T0 + timedelta(hours=2),
    )
    by_kind = {(c.kind, c.team): c.gpu_seconds for c in charges}
    assert by_kind == {
        ("overhead", "ml-platform"): 600,
        ("usage", "cms"): 1800,
        ("idle", "ml-platform"): 600,
    }
    assert (
        sum(c.amount_micros for c in charges) == 3_060_000 * 3000 // 3600 - 1
        or sum(c.amount_micros for c in charges) <= 3_060_000 * 3000 // 3600
    )


def test_short_lived_nodes_pay_the_minimum_as_overhead() -> None:
    charges = meter(pool([(0, 2), (20, 1)], deleted=3600), [], until=T0 + timedelta(hours=2))
    total = sum(c.gpu_seconds for c in charges)
    assert total == 3600 + 60  # the second node lived 20 s and is billed 60 s
    assert sum(c.gpu_seconds for c in charges if c.kind == "overhead") == 40


def test_shared_pool_split_by_gpu_seconds() -> None:
    history = pool([(0, 1)], deleted=3600, gpus=4, price=12_000_000)
    uses = [
        Use("a", "cms", 3, T0, T0 + timedelta(hours=1)),
        Use("b", "atlas", 1, T0, T0 + timedelta(hours=1)),
    ]
    charges = {c.workload: c.amount_micros for c in meter(history, uses, T0 + timedelta(hours=2))}
    assert charges == {"a": 9_000_000, "b": 3_000_000}


def test_open_hours_are_not_charged_yet() -> None:
    history = pool([(0, 1)])
    assert meter(history, [], until=T0 + timedelta(minutes=59)) == []
    assert len(meter(history, [], until=T0 + timedelta(minutes=61))) == 1


histories = st.builds(
    lambda steps, ready, life, cloud, price, gpus: (steps, ready, life, cloud, price, gpus),
    st.lists(st.tuples(st.integers(0, 4 * 3600), st.integers(0, 5)), min_size=1, max_size=12),
    st.integers(0, 3600),
    st.integers(60, 5 * 3600),
    st.sampled_from(["aws", "gcp", "azure"]),
    st.integers(1, 40_000_000),
    st.sampled_from([1, 4, 8]),
)


def _build(h: tuple[list[tuple[int, int]], int, int, str, int, int]) -> PoolHistory:
    steps, ready, life, cloud, price, gpus = h
    changes = sorted({s: n for s, n in steps if s < life}.items()) or [(0, 1)]
    return pool(changes, ready=ready, deleted=life, cloud=cloud, price=price, gpus=gpus)


@settings(max_examples=300, deadline=None)
@given(histories, st.randoms(use_true_random=False))
def test_any_order_of_events_gives_the_same_charges(h: tuple, rnd: random.Random) -> None:  # type: ignore[type-arg]
    history = _build(h)
    shuffled = list(history.node_changes)
    rnd.shuffle(shuffled)
    until = T0 + timedelta(hours=8)
    again = PoolHistory(**{**history.__dict__, "node_changes": tuple(shuffled)})
    assert meter(again, [], until) == meter(history, [], until)


@settings(max_examples=300, deadline=None)
@given(histories, st.integers(0, 8 * 3600))
def test_metering_early_then_late_never_changes_what_was_charged(h: tuple, crash_at: int) -> None:  # type: ignore[type-arg]
    # A meter pass at any time posts charges for the hours that are over; a later pass (after a
    # crash, say) gives the very same charges for those hours, and only adds later ones.
    history = _build(h)
    early = meter(history, [], T0 + timedelta(seconds=crash_at))
    late = meter(history, [], T0 + timedelta(hours=9))
    by_key = {c.key: c for c in late}
    assert all(by_key[c.key] == c for c in early)


@settings(max_examples=300, deadline=None)
@given(histories)
def test_the_total_is_the_exact_integral_under_the_billing_rule(h: tuple) -> None:  # type: ignore[type-arg]
    history = _build(h)
    rule = BILLING[history.cloud]
    exact_seconds = (
        sum(
            rule.billable((i.end - i.start).total_seconds())
            for i in instances(history, rule)
            if i.end is not None
        )
        * history.gpus_per_node
    )
    charges = meter(history, [], T0 + timedelta(hours=9))
    assert sum(c.gpu_seconds for c in charges) == exact_seconds
    for kind in ("overhead", "idle"):
        seconds = sum(c.gpu_seconds for c in charges if c.kind == kind)
        amount = sum(c.amount_micros for c in charges if c.kind == kind)
        assert amount == history.unit_price_micros * seconds // (3600 * history.gpus_per_node)


def test_custom_rule() -> None:
    assert BillingRule(minimum_s=600, granularity_s=300).billable(601) == 900

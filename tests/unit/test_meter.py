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


# -- hand-computed scenarios, to the micro-unit ------------------------------------------------


def _by_series(charges: list) -> dict[tuple[str, str | None, str], tuple[int, int]]:  # type: ignore[type-arg]
    out: dict[tuple[str, str | None, str], tuple[int, int]] = {}
    for c in charges:
        s, a = out.get((c.kind, c.workload, c.period_start.strftime("%H")), (0, 0))
        out[(c.kind, c.workload, c.period_start.strftime("%H"))] = (
            s + c.gpu_seconds,
            a + c.amount_micros,
        )
    return out


def test_a_spot_node_lost_mid_hour_is_not_charged_to_the_job() -> None:
    """Two 1-GPU spot nodes at 2.00 USD an hour, ready at once; the second is lost at :30. A
    2-GPU job runs from :15. From :30 it has one GPU, not two: 3600 GPU-seconds (15 min x 2 +
    30 min x 1), 2.00 USD; the quarter hour before it started is idle, 1.00 USD. Compared with
    the hour's capacity instead, the job paid 1.5 node-hours, the lost node's half hour included."""
    history = pool([(0, 2), (1800, 1)], deleted=3600, price=2_000_000)
    job = Use("w", "cms", 2, T0 + timedelta(minutes=15), None)
    assert _by_series(meter(history, [job], T0 + timedelta(hours=3))) == {
        ("usage", "w", "08"): (3600, 2_000_000),
        ("idle", None, "08"): (1800, 1_000_000),
    }


def test_a_pool_across_an_hour_with_two_jobs_of_different_widths() -> None:
    """One 4-GPU node at 8.00 USD an hour (so 1/1800 USD a GPU-second), created 08:20, ready
    08:30, deleted 09:30; job a (3 GPUs) 08:30-09:30, job b (1 GPU) 08:45-09:15."""
    history = pool([(0, 1)], price=8_000_000, gpus=4)
    history = PoolHistory(
        **{
            **history.__dict__,
            "created": T0 + timedelta(minutes=20),
            "node_changes": ((T0 + timedelta(minutes=20), 1),),
            "ready": T0 + timedelta(minutes=30),
            "deleted": T0 + timedelta(minutes=90),
        }
    )
    uses = [
        Use("a", "cms", 3, T0 + timedelta(minutes=30), T0 + timedelta(minutes=90)),
        Use("b", "atlas", 1, T0 + timedelta(minutes=45), T0 + timedelta(minutes=75)),
    ]
    assert _by_series(meter(history, uses, T0 + timedelta(hours=4))) == {
        ("overhead", None, "08"): (2400, 1_333_333),  # 10 min x 4 GPUs, floor of 1.3333...
        ("usage", "a", "08"): (5400, 3_000_000),
        ("usage", "b", "08"): (900, 500_000),
        ("idle", None, "08"): (900, 500_000),  # 08:30-08:45, one GPU
        ("usage", "a", "09"): (5400, 3_000_000),
        ("usage", "b", "09"): (900, 500_000),
        ("idle", None, "09"): (900, 500_000),  # 09:15-09:30, one GPU
    }


def test_a_59_and_a_half_second_azure_pool_pays_one_minute() -> None:
    """Azure bills per minute: 59.5 s is 60 s, all overhead (never ready), at 3.06 USD an hour."""
    history = PoolHistory(
        **{
            **pool([(0, 1)], ready=None, cloud="azure").__dict__,
            "deleted": T0 + timedelta(seconds=59.5),
        }
    )
    charges = meter(history, [], T0 + timedelta(hours=2))
    assert [(c.kind, c.gpu_seconds, c.amount_micros) for c in charges] == [("overhead", 60, 51_000)]


def test_a_pool_that_never_became_ready_is_all_overhead() -> None:
    charges = meter(pool([(0, 1)], ready=None, deleted=1500), [], T0 + timedelta(hours=2))
    assert [(c.kind, c.team, c.gpu_seconds, c.amount_micros) for c in charges] == [
        ("overhead", "ml-platform", 1500, 1_275_000)  # 25 min at 3.06 USD an hour
    ]


@settings(max_examples=200, deadline=None)
@given(
    histories,
    st.lists(
        st.tuples(st.integers(0, 4 * 3600), st.integers(1, 7200), st.integers(1, 8)), max_size=4
    ),
)
def test_lines_add_up_to_the_billed_time_and_never_exceed_what_was_there(
    h: tuple,  # type: ignore[type-arg]
    jobs: list[tuple[int, int, int]],
) -> None:
    history = _build(h)
    uses = [
        Use(f"w{i}", "t", g, T0 + timedelta(seconds=s), T0 + timedelta(seconds=s + d))
        for i, (s, d, g) in enumerate(jobs)
    ]
    rule = BILLING[history.cloud]
    billed = (
        sum(
            rule.billable((i.end - i.start).total_seconds())
            for i in instances(history, rule)
            if i.end is not None
        )
        * history.gpus_per_node
    )
    charges = meter(history, uses, T0 + timedelta(hours=9))
    assert sum(c.gpu_seconds for c in charges) == billed
    for i, (_, d, g) in enumerate(jobs):  # no job pays for more than it asked
        assert sum(c.gpu_seconds for c in charges if c.workload == f"w{i}") <= d * g + 1

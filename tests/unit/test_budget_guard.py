"""The spend guard's arithmetic (money/guard.py): what a running copy will cost until burst can act
again, against what its reservations still hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burst.money.guard import Run, top_up, unposted

T0 = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)
AHEAD = timedelta(seconds=75)


def run(held: int, since: datetime = T0) -> Run:
    # 2 of a node's 4 GPUs at 3.60 USD per node-hour: 500 micro-USD a second.
    return Run("b", 1, 1, since, 2, 4, 3_600_000, "USD", held)


def test_a_run_is_charged_its_share_of_the_node_from_its_last_posted_hour() -> None:
    assert unposted(run(0), T0 + timedelta(seconds=10)) == 5_000
    assert unposted(run(0), T0 - timedelta(seconds=10)) == 0  # nothing before it started


def test_a_run_its_reservations_cover_asks_for_nothing() -> None:
    now = T0 + timedelta(minutes=10)
    covered = unposted(run(0), now + AHEAD)
    assert top_up(run(covered), now, AHEAD) == 0


def test_a_run_past_its_reservations_asks_for_twice_the_time_ahead() -> None:
    now = T0 + timedelta(minutes=10)
    short = unposted(run(0), now + AHEAD) - 1
    more = top_up(run(short), now, AHEAD)
    assert more == unposted(run(0), now + 2 * AHEAD) - short
    # Topped up, it asks for nothing until the time ahead is no longer covered.
    assert top_up(run(short + more), now + AHEAD, AHEAD) == 0
    assert top_up(run(short + more), now + AHEAD + timedelta(seconds=1), AHEAD) > 0


def test_a_dispatch_holds_at_least_what_the_first_look_after_it_asks() -> None:
    from burst.money.guard import first_hold

    # 2 of 4 GPUs at 3.60 USD per node-hour: 500 micro-USD a second, 150 s over twice 75 s.
    assert first_hold(10_000, 2, 4, 3_600_000, AHEAD) == 75_000  # a short job's estimate
    assert first_hold(1_000_000, 2, 4, 3_600_000, AHEAD) == 1_000_000  # a long one's
    held = first_hold(10_000, 2, 4, 3_600_000, AHEAD)
    assert top_up(run(held), T0, AHEAD) == 0  # so its first look asks for nothing more

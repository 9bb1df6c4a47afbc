"""triggers.py: the latest start the stale check runs the queue to (`latest_start`) is where
trigger() starts to find the deadline at risk, whatever the margin, its share of the run and
the share of the run counted."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from burst.decide.onprem import Estimate, queue_sweep
from burst.decide.triggers import latest_start, trigger
from burst.model import OnPrem
from tests.builders import NOW, make_config, policy_spec, workload


@given(
    st.sampled_from(["0s", "30m", "2h"]),
    st.sampled_from([0.0, 0.1, 0.5]),
    st.sampled_from([1.0, 0.5, 0.33]),
    st.integers(1, 40 * 3600 * 1_000_000),  # runtime, microseconds
    st.integers(0, 80 * 3600),  # deadline, seconds from now
    st.integers(-3600, 80 * 3600),  # start, seconds from now, to the microsecond below
    st.integers(0, 999_999),
)
def test_the_deadline_is_at_risk_exactly_past_the_latest_start(
    margin: str, share: float, counted: float, run: int, due: int, start: int, micros: int
) -> None:
    spec = {"deadlineSafetyMargin": margin, "deadlineSafetyShare": share}
    spec["deadlineRuntimeShare"] = counted
    policy = make_config(("ml", policy_spec(trigger=spec))).policies["ml"]
    runtime = timedelta(microseconds=run)
    w = workload(deadline=NOW + timedelta(seconds=due), pending_since=NOW)
    at = NOW + timedelta(seconds=start, microseconds=micros)
    latest = latest_start(w, policy.spec.trigger, runtime)
    assert latest is not None
    sweep = queue_sweep(OnPrem({"V100": 8}), NOW, "StrictFIFO", [], {})  # read for no start
    for begin in (at, latest, latest + timedelta(microseconds=1)):
        est = Estimate("V100", begin, begin + runtime)
        why, _ = trigger(w, policy, est, sweep, NOW, False)
        assert (why is not None) == (begin > latest), (begin, latest, why)


def test_no_deadline_no_latest_start() -> None:
    policy = make_config(("ml", policy_spec())).policies["ml"]
    assert latest_start(workload(), policy.spec.trigger, timedelta(hours=1)) is None

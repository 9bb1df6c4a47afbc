"""onprem.py: the estimate of when a pending workload would start on-prem, under StrictFIFO and
BestEffortFIFO queueing."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from burst.decide.onprem import estimate_all
from burst.model import OnPrem, RunningWorkload
from tests.builders import NOW, workload

H = timedelta(hours=1)
# 5 V100s: two 1-GPU runs end at +1 h and +2 h, a 2-GPU run at +3 h; 1 GPU is free now.
FIVE_V100 = OnPrem(
    {"V100": 5},
    (
        RunningWorkload("r1", "V100", 1, NOW + H),
        RunningWorkload("r2", "V100", 1, NOW + 2 * H),
        RunningWorkload("r3", "V100", 2, NOW + 3 * H),
    ),
)
WIDE = workload("wide", gpus_per_pod=3, created=NOW - 2 * H)  # ahead of SMALL
SMALL = workload("small", gpus_per_pod=1)


def test_a_wide_job_waits_for_enough_releases_and_blocks_those_behind() -> None:
    # Created first, the wide one is ahead; it needs r1's and r2's GPUs too: +2 h.
    onprem, wide, small = FIVE_V100, WIDE, SMALL
    runtimes = {"wide": H, "small": H}
    est = estimate_all(onprem, [wide, small], runtimes, NOW)
    assert (est["wide"].start, est["wide"].finish) == (NOW + 2 * H, NOW + 3 * H)
    # The free GPU went to the wide job: the small one waits for r3, though it fits now.
    assert est["small"].start == NOW + 3 * H
    # Without the wide one, the small one takes the free GPU now.
    est = estimate_all(onprem, [wide, small], runtimes, NOW, frozenset({"wide"}))
    assert est["small"].start == NOW


def test_a_run_past_its_estimate_holds_its_gpus_for_as_long_again() -> None:
    # All 4 V100s run a job started 3 h ago and expected to end 1 h ago: it was taken to end now,
    # so the job behind it looked about to start on every pass while it kept running.
    late = RunningWorkload("r", "V100", 4, NOW - H, started=NOW - 3 * H)
    est = estimate_all(OnPrem({"V100": 4}, (late,)), [workload("next")], {"next": H}, NOW)
    assert est["next"].start == NOW + 3 * H
    # Without a start (nothing known of it), and before its estimate, nothing changes.
    unknown = RunningWorkload("r", "V100", 4, NOW - H)
    est = estimate_all(OnPrem({"V100": 4}, (unknown,)), [workload("next")], {"next": H}, NOW)
    assert est["next"].start == NOW
    on_time = RunningWorkload("r", "V100", 4, NOW + H, started=NOW - 3 * H)
    est = estimate_all(OnPrem({"V100": 4}, (on_time,)), [workload("next")], {"next": H}, NOW)
    assert est["next"].start == NOW + H


# BestEffortFIFO: the same order, but at each release every waiting workload that fits starts
# (Kueue's BestEffortFIFO and the plain kube-scheduler; config OnPremSpec cites both).

BE = "BestEffortFIFO"


def test_best_effort_lets_a_small_job_start_past_a_wide_one_that_does_not_fit() -> None:
    onprem, wide, small = FIVE_V100, WIDE, SMALL
    est = estimate_all(onprem, [wide, small], {"wide": H, "small": 3 * H}, NOW, queueing=BE)
    # The free GPU goes to the small one now, past the wide one, however long it runs...
    assert est["small"].start == NOW
    # ... and the wide one waits until 3 GPUs are free at once: r1's and r2's are not enough
    # while the small one holds the third, so it waits for r3 at +3 h (StrictFIFO: +2 h).
    assert (est["wide"].start, est["wide"].finish) == (NOW + 3 * H, NOW + 4 * H)
    strict = estimate_all(onprem, [wide, small], {"wide": H, "small": 3 * H}, NOW)
    assert strict["wide"].start == NOW + 2 * H


def test_best_effort_starves_a_wide_job_while_small_ones_take_each_release() -> None:
    # 4 V100s held by four 1-GPU runs ending an hour apart; a 4-GPU job waits first in line, and
    # three 1-GPU jobs of 4 hours behind it take each GPU as it is let go.
    running = tuple(RunningWorkload(f"r{i}", "V100", 1, NOW + (i + 1) * H) for i in range(4))
    onprem = OnPrem({"V100": 4}, running)
    wide = workload("wide", gpus_per_pod=4, created=NOW - H)
    smalls = [workload(f"s{i}", created=NOW + i * timedelta(seconds=1)) for i in range(3)]
    runtimes = {"wide": H, **{s.uid: 4 * H for s in smalls}}
    est = estimate_all(onprem, [wide, *smalls], runtimes, NOW, queueing=BE)
    assert [est[s.uid].start for s in smalls] == [NOW + H, NOW + 2 * H, NOW + 3 * H]
    # The wide one starts only when the last small one ends, at +7 h (StrictFIFO: +4 h).
    assert est["wide"].start == NOW + 7 * H
    # Each small one the plan sends away leaves the queue as it goes: the ones behind move up.
    est = estimate_all(onprem, [wide, *smalls], runtimes, NOW, frozenset({"s0"}), BE)
    assert [est[s.uid].start for s in smalls[1:]] == [NOW + H, NOW + 2 * H]
    # Once all three are gone (the next round of the plan, or the next pass), the wide one starts
    # when the running ones let all four GPUs go: +4 h.
    assert estimate_all(onprem, [wide], runtimes, NOW, queueing=BE)["wide"].start == NOW + 4 * H


def test_best_effort_gives_no_start_to_a_job_larger_than_its_product() -> None:
    est = estimate_all(
        OnPrem({"V100": 4}), [workload("big", gpus_per_pod=8)], {"big": H}, NOW, queueing=BE
    )
    assert est["big"].start is None and est["big"].finish is None


hours = st.integers(0, 6).map(lambda h: h * H)


@st.composite
def queues(draw: st.DrawFn) -> tuple[OnPrem, list, dict[str, timedelta], frozenset[str]]:
    capacity = draw(st.sampled_from([4, 8]))
    running, held = [], 0
    for i in range(draw(st.integers(0, 4))):
        gpus = draw(st.integers(1, 4))
        if held + gpus <= capacity:
            held += gpus
            running.append(RunningWorkload(f"r{i}", "V100", gpus, NOW + draw(hours)))
    pending = [
        workload(f"p{i}", gpus_per_pod=draw(st.integers(1, 9)), created=NOW - (20 - i) * H)
        for i in range(draw(st.integers(1, 8)))
    ]
    runtimes = {w.uid: draw(st.integers(1, 6)) * H for w in pending}
    leaving = frozenset(draw(st.lists(st.sampled_from([w.uid for w in pending]))))
    return OnPrem({"V100": capacity}, tuple(running)), pending, runtimes, leaving


@settings(max_examples=300, deadline=None)
@given(queues(), st.sampled_from(["StrictFIFO", "BestEffortFIFO"]))
def test_every_estimate_is_a_schedule_the_cluster_can_run(scenario, queueing) -> None:
    """The estimated starts of those that stay never hold more GPUs at once than the product
    has; under StrictFIFO none starts before one ahead of it; under BestEffortFIFO each starts
    now or as GPUs are let go, and the first in line no sooner than under StrictFIFO (those
    behind it may take what it waits for). (Under BestEffortFIFO with some leaving, those
    estimated before one left were run with it in the queue: a schedule of the queue at each
    step, not one schedule.)"""
    onprem, pending, runtimes, leaving = scenario
    if queueing == "BestEffortFIFO":
        leaving = frozenset()
    est = estimate_all(onprem, pending, runtimes, NOW, leaving, queueing)
    stays = [w for w in pending if w.uid not in leaving and est[w.uid].start is not None]
    spans = [(r.expected_end if r.expected_end > NOW else NOW, NOW, r.gpus) for r in onprem.running]
    spans += [(est[w.uid].finish, est[w.uid].start, w.gpus) for w in stays]
    for _, at, _ in spans:
        held = sum(g for end, start, g in spans if start <= at < end)
        assert held <= onprem.capacity["V100"], (at, spans)
    for w in pending:
        assert (est[w.uid].start is None) == (w.gpus > onprem.capacity["V100"])
    starts = [est[w.uid].start for w in stays]
    if queueing == "StrictFIFO":
        assert starts == sorted(starts)
    elif stays:
        strict = estimate_all(onprem, pending, runtimes, NOW, leaving)
        assert est[stays[0].uid].start >= strict[stays[0].uid].start
        releases = {NOW} | {end for end, _, _ in spans}
        assert all(start in releases for start in starts)

"""firstfit.py: the BestEffortFIFO run, asked in any order, taken back when a workload leaves and
run on, answers as a run of the queue from scratch would; an absent workload starts where it
would were it the only one of them queued. The run from scratch here is written out by hand, a
release at a time, a pod at a time on the first node with room: not the run's own code."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from burst.decide.cluster import expected_end
from burst.decide.firstfit import FirstFitRun, queue_order
from burst.model import OnPrem, RunningWorkload, Workload
from tests.builders import NOW, workload
from tests.unit.test_onprem import node_sizes, queues


def first_fit_by_hand(
    onprem: OnPrem,
    queue: list[Workload],
    runtimes: dict[str, timedelta],
    up: dict[str, datetime] | None = None,
) -> dict[str, datetime]:
    """Starts as the cluster makes them: now, then at each release, the first waiting workload in
    queue order whose pods all find a node with room (each pod the first such node), again and
    again until none does. One held for a launching pool (`up`: when that pool is up) waits in
    line until then, and is gone from it after."""
    up = up or {}
    free = node_sizes(onprem)
    names = list(free)
    releases: list[tuple[datetime, str, int]] = []
    for r in onprem.running:
        node = r.node or names[0]
        free[node] -= r.gpus
        releases.append((expected_end(r, NOW), node, r.gpus))
    waiting, starts = list(queue), {}

    def place(w: Workload) -> list[str] | None:
        took: list[str] = []
        for _ in range(w.pods):
            node = next((n for n in names if free[n] >= w.gpus_per_pod), None)
            if node is None:
                for n in took:
                    free[n] += w.gpus_per_pod
                return None
            free[node] -= w.gpus_per_pod
            took.append(node)
        return took

    at = NOW
    while True:
        started = True
        while started:
            started = False
            for w in [w for w in waiting if w.uid in up and up[w.uid] < at]:
                waiting.remove(w)
            for w in waiting:
                nodes = place(w)
                if nodes is not None:
                    starts[w.uid] = at
                    releases += [(at + runtimes[w.uid], n, w.gpus_per_pod) for n in nodes]
                    waiting.remove(w)
                    started = True
                    break
        if not releases:
            return starts
        at = min(releases)[0]
        for release in [r for r in releases if r[0] == at]:
            free[release[1]] += release[2]
            releases.remove(release)


@settings(max_examples=400, deadline=None)
@given(queues(), st.sampled_from([None, 1, 2]), st.data())
def test_the_run_taken_back_and_run_on_answers_as_a_run_from_scratch(
    scenario, shapes, data
) -> None:
    """Asked in any order, with workloads leaving before and after they start (at once, as a
    plan's walk sends one away), and whether one starts by a time; with few pod shapes
    (`shapes`), several absent of one shape wait around those in the run."""
    onprem, pending, runtimes, _ = scenario
    if shapes is not None:
        pending = [replace(w, gpus_per_pod=1 + w.gpus_per_pod % shapes, pods=1) for w in pending]
    queue = sorted(pending, key=queue_order)
    uids = [w.uid for w in queue]
    absent = frozenset(data.draw(st.lists(st.sampled_from(uids))))
    ops = data.draw(
        st.lists(
            st.tuples(st.sampled_from(["start", "leave", "by", "walk"]), st.sampled_from(uids)),
            max_size=24,
        )
    )
    run = FirstFitRun(onprem, NOW, queue, runtimes, lambda w: "V100", absent)
    gone: set[str] = set()
    for op, uid in ops:
        if op == "leave" and uid not in absent:
            run.leave(uid)
            gone.add(uid)
            continue
        present = [w for w in queue if w.uid not in gone and (w.uid not in absent or w.uid == uid)]
        expected = None if uid in gone else first_fit_by_hand(onprem, present, runtimes).get(uid)
        if op == "by":  # asked whether it starts by a time: the run goes no further than that
            until = NOW + data.draw(st.integers(0, 12)) * timedelta(minutes=30)
            if expected is not None and data.draw(st.booleans()):
                until = expected + data.draw(st.sampled_from([-1, 0])) * timedelta(microseconds=1)
            by = expected is not None and expected <= until
            assert run.starts_by(uid, until) == by, (op, uid, until, gone)
            continue
        assert run.start(uid) == expected, (op, uid, gone)
        if op == "walk" and uid not in absent:  # as a plan's walk: asked, then sent away
            run.leave(uid)
            gone.add(uid)


@settings(max_examples=300, deadline=None)
@given(queues(), st.data())
def test_workloads_held_for_a_launching_pool_take_room_in_line_until_it_is_up(
    scenario, data
) -> None:
    """Some of the queue planned onto pools still launching: each may start in its place in line
    until its pool is up (never after), and the rest of the queue starts as the cluster starts
    it, asked in any order, with workloads leaving before and after they start."""
    onprem, pending, runtimes, _ = scenario
    queue = sorted(pending, key=queue_order)
    held_uids = data.draw(st.sets(st.sampled_from([w.uid for w in queue])))
    up = {u: NOW + data.draw(st.integers(0, 12)) * timedelta(minutes=30) for u in sorted(held_uids)}
    held = [(w, runtimes[w.uid], up[w.uid]) for w in queue if w.uid in up]
    rest = [w for w in queue if w.uid not in up]
    if not rest:
        return
    ops = data.draw(
        st.lists(
            st.tuples(st.sampled_from(["start", "leave"]), st.sampled_from([w.uid for w in rest])),
            max_size=16,
        )
    )
    run = FirstFitRun(onprem, NOW, rest, runtimes, lambda w: "V100", held=held)
    gone: set[str] = set()
    for op, uid in ops:
        if op == "leave":
            run.leave(uid)
            gone.add(uid)
            continue
        present = [w for w in queue if w.uid not in gone]
        expected = (
            None if uid in gone else first_fit_by_hand(onprem, present, runtimes, up).get(uid)
        )
        assert run.start(uid) == expected, (uid, gone, up)


def test_a_small_job_that_leaves_gives_its_gpus_to_one_behind_a_wide_one() -> None:
    # 4 GPUs on one node, 2 held until +1 h. Queue: wide (4 GPUs), small (2), late (2). First
    # fit: small starts now past wide, late when r ends (+1 h), wide when late ends (+3 h).
    h = timedelta(hours=1)
    onprem = OnPrem({"V100": 4}, (RunningWorkload("r", "V100", 2, NOW + h),))
    wide = workload("wide", gpus_per_pod=4, created=NOW - 3 * h)
    small = workload("small", gpus_per_pod=2, created=NOW - 2 * h)
    late = workload("late", gpus_per_pod=2, created=NOW - h)
    runtimes = {"wide": h, "small": 2 * h, "late": 2 * h}
    run = FirstFitRun(onprem, NOW, [wide, small, late], runtimes, lambda w: "V100")
    assert [run.start(u) for u in ("wide", "small", "late")] == [NOW + 3 * h, NOW, NOW + h]
    run.leave("small")  # taken back to now, as if never queued: late takes the free GPUs
    assert [run.start(u) for u in ("late", "wide")] == [NOW, NOW + 2 * h]

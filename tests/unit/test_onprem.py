"""onprem.py: the estimate of when a pending workload would start on-prem, under StrictFIFO and
BestEffortFIFO queueing, on the cluster's nodes (a pod's GPUs on one node)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from burst.decide.cluster import Nodes
from burst.decide.firstfit import queue_order
from burst.decide.onprem import estimate_all, queue_sweep
from burst.model import OnPrem, OnPremNode, RunningWorkload
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


# Node boundaries: a pod needs its GPUs on one node (the kube-scheduler's NodeResourcesFit).
# Two 4-GPU nodes, each with 2 GPUs held: by one run until +1 h on a, another until +2 h on b.
TWO_NODES = OnPrem(
    {"V100": 8},
    (
        RunningWorkload("ra", "V100", 2, NOW + H, node="a"),
        RunningWorkload("rb", "V100", 2, NOW + 2 * H, node="b"),
    ),
    (OnPremNode("a", "V100", 4), OnPremNode("b", "V100", 4)),
)


def test_a_pod_waits_for_its_gpus_on_one_node_though_enough_are_free_across_nodes() -> None:
    four = workload("four", gpus_per_pod=4)
    for queueing in ("StrictFIFO", BE):
        est = estimate_all(TWO_NODES, [four], {"four": H}, NOW, queueing=queueing)
        assert est["four"].start == NOW + H, queueing  # node a, once ra ends
        # Without the node list, the 4 free GPUs looked like room now.
        flat = OnPrem(TWO_NODES.capacity, TWO_NODES.running)
        assert estimate_all(flat, [four], {"four": H}, NOW, queueing=queueing)["four"].start == NOW


def test_pods_of_one_workload_go_to_different_nodes() -> None:
    # Two pods of 2 GPUs fit now, one on each node; a third waits for a release.
    two = workload("two", gpus_per_pod=2, pods=2)
    three = workload("three", gpus_per_pod=2, pods=3)
    for queueing in ("StrictFIFO", BE):
        est = estimate_all(TWO_NODES, [two], {"two": H}, NOW, queueing=queueing)
        assert est["two"].start == NOW
        est = estimate_all(TWO_NODES, [three], {"three": H}, NOW, queueing=queueing)
        assert est["three"].start == NOW + H


def test_a_pod_wider_than_every_node_never_starts_though_the_product_has_the_gpus() -> None:
    eight = workload("eight", gpus_per_pod=8)
    for queueing in ("StrictFIFO", BE):
        est = estimate_all(TWO_NODES, [eight], {"eight": H}, NOW, queueing=queueing)
        assert est["eight"].start is None, queueing
    # As two pods of 4 it runs once both nodes are free.
    split = workload("split", gpus_per_pod=4, pods=2)
    assert estimate_all(TWO_NODES, [split], {"split": H}, NOW)["split"].start == NOW + 2 * H


def test_best_effort_lets_a_pod_that_fits_a_node_past_one_that_fits_none_yet() -> None:
    four = workload("four", gpus_per_pod=4, created=NOW - H)
    one = workload("one", gpus_per_pod=2)  # fits node b's 2 free GPUs now
    est = estimate_all(TWO_NODES, [four, one], {"four": H, "one": 3 * H}, NOW, queueing=BE)
    assert est["one"].start == NOW
    # Pods go to the first node with room (a model: the kube-scheduler scores nodes): the small
    # one took a's free half, so the wide one waits for b to empty at +2 h.
    assert est["four"].start == NOW + 2 * H
    strict = estimate_all(TWO_NODES, [four, one], {"four": H, "one": 3 * H}, NOW)
    assert strict["one"].start == NOW + H  # behind the wide one: on a's other half, or b


hours = st.integers(0, 6).map(lambda h: h * H)


@st.composite
def queues(draw: st.DrawFn) -> tuple[OnPrem, list, dict[str, timedelta], frozenset[str]]:
    capacity = draw(st.sampled_from([4, 8]))
    # No node list (one node of the product's GPUs), or nodes of 2 or 4 GPUs.
    width = draw(st.sampled_from([None, 2, 4]))
    sizes = [capacity] if width is None else [width] * (capacity // width)
    names = [f"n{k}" for k in range(len(sizes))]
    free = list(sizes)
    running = []
    for i in range(draw(st.integers(0, 4))):
        gpus = draw(st.integers(1, 4))
        k = draw(st.integers(0, len(sizes) - 1))
        if gpus <= free[k]:
            free[k] -= gpus
            node = names[k] if width else ""
            running.append(RunningWorkload(f"r{i}", "V100", gpus, NOW + draw(hours), node=node))
    pending = [
        workload(
            f"p{i}",
            gpus_per_pod=draw(st.integers(1, 5)),
            pods=draw(st.integers(1, 2)),
            created=NOW - (20 - i) * H,
        )
        for i in range(draw(st.integers(1, 8)))
    ]
    runtimes = {w.uid: draw(st.integers(1, 6)) * H for w in pending}
    leaving = frozenset(draw(st.lists(st.sampled_from([w.uid for w in pending]))))
    nodes = (
        tuple(OnPremNode(n, "V100", g) for n, g in zip(names, sizes, strict=True)) if width else ()
    )
    return OnPrem({"V100": capacity}, tuple(running), nodes), pending, runtimes, leaving


def node_sizes(onprem: OnPrem) -> dict[str, int]:
    return {n.name: n.gpus for n in onprem.nodes} or {"": onprem.capacity["V100"]}


def fits_nodes(sizes: list[int], per: int, pods: int) -> bool:
    """Whether the pods could all be placed, by trying every node for each in turn (not the
    estimate's rule): an independent check of its answer."""
    if pods == 0:
        return True
    return any(
        f >= per and fits_nodes([*sizes[:k], f - per, *sizes[k + 1 :]], per, pods - 1)
        for k, f in enumerate(sizes)
    )


def placeable(stays: list, est: dict, sizes: dict[str, int], held: list[tuple]) -> bool:
    """Whether every pod of `stays` (by start) can have a node whose GPUs are free for its whole
    run, given what `held` (node, GPUs, from, to) holds: a search over every choice of nodes, not
    the estimate's first fit (a node's load grows only at a start, so each start is checked)."""
    if not stays:
        return True
    w, rest = stays[0], stays[1:]
    start, finish = est[w.uid].start, est[w.uid].finish

    def pods(left: int, first: int, held: list[tuple]) -> bool:
        if left == 0:
            return placeable(rest, est, sizes, held)
        names = list(sizes)
        for k in range(first, len(names)):
            node = names[k]
            took = [h for h in held if h[0] == node and h[2] <= start < h[3]]
            if sizes[node] - sum(h[1] for h in took) >= w.gpus_per_pod and pods(
                left - 1, k, [*held, (node, w.gpus_per_pod, start, finish)]
            ):
                return True
        return False

    return pods(w.pods, 0, held)


@settings(max_examples=300, deadline=None)
@given(queues(), st.sampled_from(["StrictFIFO", "BestEffortFIFO"]))
def test_every_estimate_is_a_schedule_the_cluster_can_run(scenario, queueing) -> None:
    """The estimated starts of those that stay leave each pod a node with its GPUs free for its
    whole run (searched for, not placed the estimate's way); under StrictFIFO none starts
    before one ahead of it; under BestEffortFIFO each starts now or as
    GPUs are let go, and the first in line no sooner than under StrictFIFO (those behind it may
    take what it waits for). A workload whose pods fit no set of nodes never starts. (Under
    BestEffortFIFO with some leaving, those estimated before one left were run with it in the
    queue: a schedule of the queue at each step, not one schedule.)"""
    onprem, pending, runtimes, leaving = scenario
    if queueing == "BestEffortFIFO":
        leaving = frozenset()
    est = estimate_all(onprem, pending, runtimes, NOW, leaving, queueing)
    stays = [w for w in pending if w.uid not in leaving and est[w.uid].start is not None]
    sizes = node_sizes(onprem)
    held = [(r.node or "", r.gpus, NOW, max(r.expected_end, NOW)) for r in onprem.running]
    order = {w.uid: i for i, w in enumerate(pending)}
    by_start = sorted(stays, key=lambda w: (est[w.uid].start, order[w.uid]))
    assert placeable(by_start, est, sizes, held), (stays, est)
    for w in pending:
        never = not fits_nodes(list(sizes.values()), w.gpus_per_pod, w.pods)
        assert (est[w.uid].start is None) == never, w
    starts = [est[w.uid].start for w in stays]
    if queueing == "StrictFIFO":
        assert starts == sorted(starts)
    elif stays:
        strict = estimate_all(onprem, pending, runtimes, NOW, leaving)
        assert est[stays[0].uid].start >= strict[stays[0].uid].start
        releases = {NOW} | {max(r.expected_end, NOW) for r in onprem.running}
        releases |= {est[w.uid].finish for w in stays}
        assert all(start in releases for start in starts)


@settings(max_examples=300, deadline=None)
@given(queues(), st.integers(1, 3))
def test_a_strict_estimate_is_that_of_the_queue_without_those_that_left_ahead(
    scenario, shapes
) -> None:
    """Walking the queue, each workload's estimate equals a fresh estimate of the queue of those
    ahead of it that stayed, then it: those that left are as if never queued. (The sweep reuses
    the start of the last that left for the next of its shape; most leaving workloads share a
    few shapes, as here.)"""
    onprem, pending, runtimes, leaving = scenario
    pending = [replace(w, gpus_per_pod=1 + w.gpus_per_pod % shapes, pods=1) for w in pending]
    est = estimate_all(onprem, pending, runtimes, NOW, leaving)
    for i, w in enumerate(pending):
        ahead = [x for x in pending[:i] if x.uid not in leaving]
        alone = estimate_all(onprem, [*ahead, w], runtimes, NOW)
        assert est[w.uid] == alone[w.uid], w


@settings(max_examples=300, deadline=None)
@given(queues(), st.data())
def test_a_workload_that_stays_unestimated_holds_what_its_estimate_would(scenario, data) -> None:
    """A strict sweep's `stays` (no estimate made, a pod started in one step) leaves every
    estimate after it as estimating the workload and staying it would (estimate_all)."""
    onprem, pending, runtimes, leaving = scenario
    unread = data.draw(st.sets(st.sampled_from([w.uid for w in pending])))
    expected = estimate_all(onprem, pending, runtimes, NOW, leaving)
    sweep = queue_sweep(onprem, NOW, "StrictFIFO", pending, runtimes)
    for w in sorted(pending, key=queue_order):
        if w.uid in unread and w.uid not in leaving:
            sweep.stays(w, runtimes[w.uid])
            continue
        est = sweep.estimate(w, runtimes[w.uid])
        assert est == expected[w.uid], w
        if w.uid in leaving:
            sweep.leave()
        else:
            sweep.stay(w, est)


@given(queues())
def test_a_best_effort_estimate_is_that_of_the_queue_without_those_that_left_before_it(
    scenario,
) -> None:
    """Walking the queue under BestEffortFIFO, each workload's estimate equals a fresh run of the
    whole queue less those that left before it was estimated (ahead of it or not: one that
    leaves gives back GPUs that those anywhere in the queue may take)."""
    onprem, pending, runtimes, leaving = scenario
    est = estimate_all(onprem, pending, runtimes, NOW, leaving, BE)
    order = sorted(pending, key=queue_order)
    for i, w in enumerate(order):
        gone = {x.uid for x in order[:i] if x.uid in leaving}
        rest = [x for x in order if x.uid not in gone]
        assert est[w.uid] == estimate_all(onprem, rest, runtimes, NOW, queueing=BE)[w.uid], w


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(1, 8), st.integers(1, 3), st.booleans()), max_size=30),
)
def test_nodes_place_first_fit_and_count_room_as_a_scan_would(sizes, steps) -> None:
    """The node bookkeeping (counts by free GPUs, a max tree) against a plain list: the same
    first fit node by node, the same answer to whether pods fit now and on empty nodes."""
    nodes = Nodes([f"n{k}" for k in range(len(sizes))], list(sizes))
    free, held = list(sizes), []
    for per, pods, release in steps:
        if release and held:
            k, gpus = held.pop(0)
            nodes.add(k, gpus)
            free[k] += gpus
            continue
        room = sum(f // per for f in free)
        assert nodes.fits(per, pods) == (room >= pods)
        assert nodes.could_fit(per, pods) == (sum(s // per for s in sizes) >= pods)
        if room >= pods:
            expect = []
            for _ in range(pods):
                k = next(k for k, f in enumerate(free) if f >= per)
                free[k] -= per
                expect.append(k)
            assert nodes.place(per, pods) == expect
            held += [(k, per) for k in expect]
        assert nodes.free == free and nodes.total == sum(free)


@settings(max_examples=200, deadline=None)
@given(queues(), st.lists(st.integers(0, 8 * 60), min_size=1, max_size=4))
def test_one_onprem_state_estimated_at_later_times_gives_what_a_fresh_one_does(
    scenario, minutes
) -> None:
    """A replay plans many times on one OnPrem object, and the estimate keeps where its nodes and
    runs are (decide/cluster.py): asked at later and later times, with runs past their expected
    end then expected to run on, it must estimate as an equal OnPrem seen for the first time."""
    onprem, pending, runtimes, leaving = scenario
    onprem = replace(onprem, running=tuple(replace(r, started=NOW - H) for r in onprem.running))
    nows = [NOW + timedelta(minutes=m) for m in sorted(minutes)]
    kept = [estimate_all(onprem, pending, runtimes, now, leaving, "StrictFIFO") for now in nows]
    fresh = [
        estimate_all(replace(onprem), pending, runtimes, now, leaving, "StrictFIFO") for now in nows
    ]
    assert kept == fresh

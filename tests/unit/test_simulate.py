"""simulate.py: the replay, on small cases worked out by hand, and its determinism."""

from __future__ import annotations

import gc
import math
import random
from dataclasses import replace
from datetime import timedelta

import pytest

from burst import config
from burst.amounts import Money
from burst.cloud import catalog
from burst.decide.pools import first_fit
from burst.model import CLOUDS, Action, CreatePool, Dispatch, OfferKey, ResizePool
from burst.sim import baselines, compare, simulate, state, variants
from burst.sim.state import START, CloudModel
from burst.sim.trace import SimJob
from providers.sim import Latency
from tests.conftest import ROOT

SHIPPED = catalog.shipped()
HOUR = timedelta(hours=1)
# The shipped configuration on a strict queue, as the cases worked out by hand here assume (it says
# BestEffortFIFO, Kueue's default; the best-effort cases ask for it).
CFG = variants.with_queueing(
    config.load([ROOT / "config"], config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators())),
    "StrictFIFO",
)
assert CFG.service is not None
OFFERS = SHIPPED.with_overrides(CFG.service.spec.catalog)
POLICY = simulate.policy_of(CFG)
# Clouds that answer in exactly five minutes and never fail: figures a reader can check.
STEADY = CloudModel(
    shortage=0,
    launch_failure=0,
    spot_interruptions_per_hour=0,
    latency={c: Latency(median_s=300, sigma=0, cap_s=3600) for c in CLOUDS},
)


def job(name: str, submit: int, duration: int, gpus: int, deadline: int) -> SimJob:
    return SimJob(name, submit, duration, gpus, 1, gpus, deadline, "cms-ml")


def replay(policy: simulate.Policy, jobs: list[SimJob], clouds: CloudModel = STEADY):
    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=clouds)
    return world, world.run(policy)


def test_never_is_strict_fifo_on_prem() -> None:
    _, out = replay(baselines.Never(), [job("a", 0, 100, 8, 1000), job("b", 10, 50, 4, 1000)])
    # a runs 0-100 on all 8 GPUs; b waits for it and runs 100-150.
    assert (out.mean_jct_s, out.mean_queue_s, out.deadlines_met) == (120, 45, 1.0)
    assert out.onprem_utilisation == pytest.approx((8 * 100 + 4 * 50) / (8 * 150))
    assert out.cost_usd_micros == 0 and out.pools_created == 0


def test_a_replay_collects_garbage_less_often_and_puts_the_collector_back() -> None:
    """A plan holds thousands of tuples at once: a replay spaces the collector's runs out while
    it decides (simulate.spaced_collections), and leaves the process as it found it."""
    seen: list[int] = []

    class Watching(baselines.Never):
        def decide(self, world: simulate.World) -> list[Action]:
            seen.append(gc.get_threshold()[0])
            return list(super().decide(world))

    before = gc.get_threshold()
    replay(Watching(), [job("a", 0, 100, 8, 1000), job("b", 10, 50, 4, 1000)])
    assert seen and set(seen) == {simulate.YOUNG_COLLECTION_THRESHOLD}
    assert gc.get_threshold() == before


def test_the_cluster_places_each_pod_on_one_node() -> None:
    # 16 GPUs are two nodes of 8. a (6 GPUs) and b (6) take 6 of each; c (4 GPUs, one pod)
    # finds 4 free but 2 on each node, and waits for a to end at 1000; d (4 GPUs as two pods of
    # 2) fits at once, one pod on each node's 2.
    jobs = [
        job("a", 0, 1000, 6, 10_000),
        job("b", 0, 2000, 6, 10_000),
        job("c", 10, 50, 4, 10_000),
        SimJob("d", 20, 50, 4, 2, 2, 10_000, "cms-ml"),
    ]
    for queueing, starts in (
        ("StrictFIFO", [0, 0, 1000, 1000]),
        ("BestEffortFIFO", [0, 0, 1000, 20]),
    ):
        cfg = variants.with_queueing(CFG, queueing)
        world = simulate.World(jobs, {"V100": 16}, cfg, OFFERS, seed=1, clouds=STEADY)
        world.run(baselines.Never())
        assert [j.started for j in world.jobs] == starts, queueing
    # A pod wider than any node never runs on-prem, though the GPUs are there.
    world = simulate.World([job("wide", 0, 50, 16, 10_000)], {"V100": 16}, CFG, OFFERS, seed=1)
    world.run(baselines.Never())
    assert world.never_fits == {0} and world.jobs[0].started is None


def test_starburst_runs_on_prem_out_of_order_and_caps_the_queue() -> None:
    # 8 GPUs: a holds 6 until 1000; b (4 GPUs) cannot start, c (2) can. In strict FIFO c waits
    # behind b; out of order c runs at once, past b.
    jobs = [job("a", 0, 1000, 6, 10_000), job("b", 10, 50, 4, 10_000), job("c", 20, 50, 2, 10_000)]
    world, _ = replay(baselines.Never(), jobs)
    assert [j.started for j in world.jobs] == [0, 1000, 1000]  # (b runs 1000-1050)
    # A waiting budget long enough that no job here waits it out: only the queue sends any.
    long = timedelta(hours=10)
    starburst = baselines.starburst(CFG, POLICY, OFFERS, jobs, long, queue_cap=30)
    world, out = replay(starburst, jobs)
    assert [j.started for j in world.jobs] == [0, 1000, 20] and out.burst_jobs == 0
    # A cap of one queued job: the second one queued (d, behind b) bursts at the next tick.
    jobs.append(job("d", 30, 50, 4, 10_000))
    capped = baselines.starburst(CFG, POLICY, OFFERS, jobs, long, queue_cap=1)
    world, out = replay(capped, jobs)
    assert world.jobs[3].ran_in_cloud and not world.jobs[1].ran_in_cloud and out.burst_jobs == 1


def test_a_best_effort_cluster_runs_every_policy_out_of_order_and_burst_expects_it() -> None:
    # As above: a holds 6 of 8 GPUs until 1000, b (4 GPUs) waits, c (2 GPUs) fits now but must
    # finish by 400. A StrictFIFO cluster runs c after b: burst sends c to a cloud. A
    # BestEffortFIFO cluster starts c at once: every policy's cluster does, and burst, whose
    # estimate runs the queue the same way, keeps it.
    jobs = [job("a", 0, 1000, 6, 10_000), job("b", 10, 50, 4, 10_000), job("c", 20, 50, 2, 400)]
    world, out = replay(simulate.Burst(CFG), jobs)
    assert world.jobs[2].ran_in_cloud and out.burst_jobs == 1
    best_effort = variants.with_queueing(CFG, "BestEffortFIFO")
    for policy in (baselines.Never(), simulate.Burst(best_effort)):
        world = simulate.World(jobs, {"V100": 8}, best_effort, OFFERS, seed=1, clouds=STEADY)
        out = world.run(policy)
        assert [j.started for j in world.jobs] == [0, 1000, 20] and out.burst_jobs == 0


def test_a_best_effort_cluster_starts_in_queue_order_what_fits_at_a_release() -> None:
    # 8 GPUs: a holds them all until 1000. Then b (4 GPUs) starts first in queue order, c (6)
    # does not fit what is left, d (2) does, past c, and e (4) does not: c starts when b and d
    # end (1100), e when c does (1200). Taken from the back of the queue, e and d would start
    # at 1000 and b after them.
    shapes = [("b", 4), ("c", 6), ("d", 2), ("e", 4)]
    jobs = [job("a", 0, 1000, 8, 10_000)]
    jobs += [job(name, 10 * k, 100, gpus, 10_000) for k, (name, gpus) in enumerate(shapes, 1)]
    best_effort = variants.with_queueing(CFG, "BestEffortFIFO")
    world = simulate.World(jobs, {"V100": 8}, best_effort, OFFERS, seed=1, clouds=STEADY)
    world.run(baselines.Never())
    assert [j.started for j in world.jobs] == [0, 1000, 1100, 1000, 1200]


def test_no_wait_bursts_at_the_next_tick_and_the_node_goes_when_empty() -> None:
    world, out = replay(
        baselines.no_wait(CFG, POLICY, OFFERS),
        [job("a", 0, 1000, 8, 10_000), job("b", 10, 50, 4, 10_000)],
    )
    # a holds on-prem until 1000. b queues at 10; the tick at 30 asks for a node, up at 330; b runs 330-380; the empty node
    # is scaled down 600 s later, at 980: 950 s billed.
    (pool,) = world.pool_list
    regions = {("aws", "eu-central-1"), ("gcp", "europe-west4"), ("azure", "eastus")}
    cheapest = min(
        (
            o
            for o in OFFERS
            if o.capacity == "on-demand"
            and o.gpus >= 4
            and (o.cloud, o.region) in regions
            and o.accelerator in {"V100", "V100-32GB", "A10G", "L4", "A100", "T4", "A100-80GB"}
            and o.hourly.micros <= 50_000_000
        ),
        key=lambda o: o.hourly.micros,
    )
    assert pool.offer == cheapest.key
    hourly = cheapest.hourly.micros
    assert out.cost_usd_micros == hourly * 950 // 3600
    assert out.overhead_usd_micros == hourly * 300 // 3600
    gpus = cheapest.gpus
    assert out.idle_usd_micros == int(hourly * (gpus * 650 - 4 * 50) / (3600 * gpus))
    # Of that, the node ran nothing from 380 to 980; the rest is its GPUs b left free.
    assert out.idle_empty_usd_micros == hourly * 600 // 3600
    b = world.jobs[1]
    assert (b.started, b.finished, b.ran_in_cloud) == (330, 380, True)
    assert out.burst_jobs == 1 and out.deadlines_met == 1.0


def _peak(spans: list[tuple[float, float]]) -> int:
    """The most of these [start, end) spans that overlap at any moment."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_the_baselines_keep_to_the_pool_and_node_caps() -> None:
    # config/'s policy: at most 4 pools of 8 nodes. On-prem is full for a day; 40 jobs of one
    # 8-GPU pod each queue at once, an hour each. No-wait opens 4 pools, then grows them to 8
    # nodes: 32 jobs run at once, the last 8 wait for the first to end.
    limits = POLICY.spec.limits
    assert (limits.max_pools, limits.max_nodes_per_pool) == (4, 8)
    hog = job("hog", 0, 24 * 3600, 8, 10**6)
    jobs = [hog] + [job(f"j{k}", 10, 3600, 8, 10**6) for k in range(40)]
    world, out = replay(baselines.no_wait(CFG, POLICY, OFFERS), jobs)
    pools = [
        (p.created, max(n.ended for n in p.nodes if n.ended is not None)) for p in world.pool_list
    ]
    assert _peak(pools) == 4
    for p in world.pool_list:
        nodes = [(n.requested, n.ended) for n in p.nodes if n.ended is not None]
        assert _peak(nodes) <= 8
    starts = sorted(j.started for j in world.jobs[1:] if j.started is not None)
    assert len(starts) == 40 and out.burst_jobs == 40
    assert starts[31] < 3600 < starts[32]  # the last 8 took the room the first left


def test_at_the_pool_cap_a_baseline_takes_any_offer_that_suits_the_job() -> None:
    # Four 8-GPU jobs hold the 4 pools; a 1-GPU job behind them, whose cheapest offer has no
    # pool, grows one of theirs by a node.
    hog = job("hog", 0, 24 * 3600, 8, 10**6)
    eights = [job(f"j{k}", 10, 3600, 8, 10**6) for k in range(4)]
    small = job("small", 20, 3600, 1, 10**6)
    world, out = replay(baselines.no_wait(CFG, POLICY, OFFERS), [hog, *eights, small])
    assert len(world.pool_list) == 4 and out.burst_jobs == 5
    assert sorted(len(p.nodes) for p in world.pool_list) == [1, 1, 1, 2]


def test_at_the_pool_cap_a_node_grown_for_one_job_takes_the_next_in_the_same_decision() -> None:
    # As above with two 1-GPU jobs queued together: the first grows a pool by an 8-GPU node, and
    # the second, which found no room in that offer's pools a moment before, takes the node's
    # room rather than growing a pool again.
    hog = job("hog", 0, 24 * 3600, 8, 10**6)
    eights = [job(f"j{k}", 10, 3600, 8, 10**6) for k in range(4)]
    smalls = [job(f"s{k}", 20, 3600, 1, 10**6) for k in range(2)]
    world, out = replay(baselines.no_wait(CFG, POLICY, OFFERS), [hog, *eights, *smalls])
    assert len(world.pool_list) == 4 and out.burst_jobs == 6
    assert sorted(len(p.nodes) for p in world.pool_list) == [1, 1, 1, 2]


def test_a_baseline_pool_past_its_lifetime_takes_only_work_that_ends_before_its_own() -> None:
    # The policy's max lifetime is 24 h: four 8-GPU runs of 25 h hold the 4 pools. At the pool
    # cap, a job queued a day later that ends before them grows one of them, as burst's would
    # (it keeps no pool up longer); one that would end after them grows none: it waits until
    # they end and go, and then has a pool of its own.
    hog = job("hog", 0, 48 * 3600, 8, 10**7)
    long_runs = [job(f"l{k}", 10, 25 * 3600, 8, 10**7) for k in range(4)]
    short = job("late", 24 * 3600 + 100, 1800, 8, 10**7)
    world, out = replay(baselines.no_wait(CFG, POLICY, OFFERS), [hog, *long_runs, short])
    assert sorted(len(p.nodes) for p in world.pool_list) == [1, 1, 1, 2]
    started = world.jobs[5].started
    assert out.burst_jobs == 5 and started is not None and started < 25 * 3600
    long = replace(short, duration=3 * 3600)
    world, out = replay(baselines.no_wait(CFG, POLICY, OFFERS), [hog, *long_runs, long])
    assert [len(p.nodes) for p in world.pool_list] == [1] * 5 and out.burst_jobs == 5
    started = world.jobs[5].started
    assert started is not None and started > 25 * 3600


def test_below_the_cap_a_baseline_takes_the_room_of_a_lapsed_pool_for_work_ending_before_it() -> (
    None
):
    # One pool up, past its lifetime: two nodes of the job's offer (4 GPUs), one free, the other's
    # work running until t=10,000. Below the cap a 4-GPU job that ends by then takes that room,
    # as burst's would (the pool is up that long anyway); one ending later gets a pool of its
    # own, and neither grows it.
    rule = baselines.no_wait(CFG, POLICY, OFFERS)
    spec = job("x", 0, 3600, 4, 10**7)
    choice = rule._choices(spec, "V100")[0][0]
    for ends, into in ((9_000.0, "old"), (11_000.0, None)):
        rule._rooms, rule._no_fit, rule._pools = {}, set(), 1
        lapsed = {choice.offer.key: {"old": ([0, choice.offer.gpus], 10_000.0)}}
        actions: list[Action] = []
        found = rule._pool(choice, spec, {}, {}, lapsed, actions, ends, new=True)
        assert (found == "old") == (into == "old") and found is not None
        assert not [a for a in actions if isinstance(a, ResizePool)]
        if into == "old":
            assert lapsed[choice.offer.key]["old"][0] == [0, 0] and not actions


def test_a_job_refused_a_lapsed_pool_does_not_refuse_a_shorter_one_of_its_shape_behind_it() -> None:
    # As above, with both jobs queued a day later at once, the longer first: it would end after
    # the lapsed pools' work and is refused; the shorter one behind it, of the same shape, still
    # grows one of them in the same decision rather than waiting for a pool of its own.
    hog = job("hog", 0, 48 * 3600, 8, 10**7)
    long_runs = [job(f"l{k}", 10, 25 * 3600, 8, 10**7) for k in range(4)]
    long = job("long", 24 * 3600 + 100, 3 * 3600, 8, 10**7)
    short = job("short", 24 * 3600 + 100, 1800, 8, 10**7)
    world, _ = replay(baselines.no_wait(CFG, POLICY, OFFERS), [hog, *long_runs, long, short])
    started = world.jobs[6].started
    assert started is not None and started < 25 * 3600, started
    started = world.jobs[5].started
    assert started is not None and started > 25 * 3600


def test_a_job_refused_at_the_pool_cap_takes_the_room_a_cloud_job_leaves_at_the_next_tick() -> None:
    # One pool of one node allowed. `a` (8 GPUs, 1 h) has it from 330 s to 3,930 s; `b` comes at
    # 20 s and is refused at the cap. When `a` ends, the service's next pass would plan `b` into
    # the node it left: so does the replay, at the tick `a` ends on (the reconcile interval is
    # 30 s), not at the pool's idle check a TTL (10 minutes) later.
    cfg = variants.with_limits(CFG, POLICY.metadata.name, max_pools=1, max_nodes_per_pool=1)
    tight = cfg.policies[POLICY.metadata.name]
    hog = job("hog", 0, 48 * 3600, 8, 10**7)
    a, b = job("a", 10, 3600, 8, 10**7), job("b", 20, 3600, 8, 10**7)
    world = simulate.World([hog, a, b], {"V100": 8}, cfg, OFFERS, seed=1, clouds=STEADY)
    out = world.run(baselines.no_wait(cfg, tight, OFFERS))
    assert out.burst_jobs == 2 and len(world.pool_list) == 1
    assert (world.jobs[1].started, world.jobs[2].started) == (330, 3930)


def test_a_baseline_sends_no_job_over_the_per_job_cost_cap() -> None:
    # Its cheapest run costs more than the policy's 500 CHF: it waits for on-prem.
    hog = job("hog", 0, 24 * 3600, 8, 10**6)
    long = job("long", 10, 200 * 3600, 8, 10**7)
    world, out = replay(baselines.no_wait(CFG, POLICY, OFFERS), [hog, long])
    assert out.burst_jobs == 0 and world.jobs[1].started == 24 * 3600


def test_compute_wait_waits_by_the_runtime_every_policy_is_told() -> None:
    # k set so that the 100 s job may wait 100 s: told its runtime, it bursts at the first tick
    # after that; told nothing (the policy's default, 4 h), it waits 4 h, as burst would be told.
    hog = job("hog", 0, 10 * 3600, 8, 10**6)
    short = job("short", 10, 100, 1, 10**6)
    rule = baselines.compute_wait(CFG, POLICY, OFFERS, [short], timedelta(seconds=100))
    starts = {}
    for told in ("exact", "none"):
        world = simulate.World(
            [hog, short], {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY, runtimes=told
        )
        world.run(rule)
        assert world.jobs[1].ran_in_cloud
        starts[told] = world.jobs[1].started
    assert starts == {"exact": 120 + 300, "none": 14_430 + 300}


def test_burst_sends_the_tight_job_and_keeps_the_loose_one() -> None:
    hog = job("hog", 0, 4 * 3600, 8, 10**6)  # on-prem is full for 4 h (< the 6 h max wait)
    tight = job("tight", 10, 600, 1, 10 + 600 + 3000)
    loose = job("loose", 20, 600, 1, 100_000)
    world, out = replay(simulate.Burst(CFG), [hog, tight, loose])
    ran = {j.spec.job_id: j.ran_in_cloud for j in world.jobs}
    assert ran == {"hog": False, "tight": True, "loose": False}
    assert out.deadlines_met == 1.0 and out.cost_usd_micros > 0
    assert world.jobs[2].started == 4 * 3600  # the loose job waited for on-prem


def test_a_pool_with_no_work_in_sight_goes_at_the_tick_its_job_ends_rather_than_a_ttl_later() -> (
    None
):
    hog = job("hog", 0, 4 * 3600, 8, 10**6)
    tight = job("tight", 10, 600, 1, 10 + 600 + 3000)
    ttl = CFG.policies[POLICY.metadata.name].spec.teardown.idle_ttl.total_seconds()
    ended = {}
    for choice in ("fixed", "next-arrival"):
        cfg = variants.with_teardown(CFG, POLICY.metadata.name, idle_ttl_choice=choice)
        world = simulate.World([hog, tight], {"V100": 8}, cfg, OFFERS, seed=1, clouds=STEADY)
        world.run(simulate.Burst(cfg))
        (pool,) = world.pool_list
        (node,) = pool.nodes
        assert world.jobs[1].finished is not None and node.ended is not None
        ended[choice] = node.ended - world.jobs[1].finished
    # Fixed: the TTL (the autoscaler's scale-down of the empty node comes as late). Next-arrival:
    # one send in the last hour, none waiting: the next is an hour off, so the pool goes at the
    # next decision tick.
    assert ended["fixed"] == ttl
    assert 0 <= ended["next-arrival"] < world.tick


def test_a_pool_kept_for_its_policys_rate_of_sends_goes_once_that_rate_falls_not_at_its_ttl() -> (
    None
):
    """Tight jobs sent a minute apart, one more than an hour of sends needs to keep an idle pool
    (one sooner than each launch), on-prem busy for four hours: their pools, idle once they end,
    are kept. The service asks every pass; the replay asks again when the second send is an hour
    old, one too few being left, and the pools go then, not at their 2-hour TTL."""
    assert CFG.service is not None
    launch = next(t.provisioning for t in CFG.service.spec.targets if t.cloud == "gcp")
    needed = math.ceil(timedelta(hours=1) / launch)
    hog = job("hog", 0, 4 * 3600, 8, 10**6)
    tight = [job(f"t{i}", 10 + 60 * i, 600, 1, 10 + 60 * i + 3600) for i in range(needed + 1)]
    cfg = variants.with_teardown(
        CFG, POLICY.metadata.name, idle_ttl=timedelta(hours=2), idle_ttl_choice="next-arrival"
    )
    world = simulate.World([hog, *tight], {"V100": 8}, cfg, OFFERS, seed=1, clouds=STEADY)
    world.run(simulate.Burst(cfg))
    assert all(j.ran_in_cloud for j in world.jobs[1:])
    sent = [math.ceil(j.spec.submit / world.tick) * world.tick for j in world.jobs[1:]]  # at once
    falls = sent[1] + 3600
    for pool in world.pool_list:  # on GCP, the cheapest; their empty nodes went before (autoscaler)
        assert pool.target.startswith("gcp") and pool.idle_since is not None
        assert pool.idle_since + 600 < falls <= (pool.closed or 0) < falls + world.tick


def test_the_clouds_draw_the_same_for_a_launch_whatever_was_drawn_before_it() -> None:
    """Common random numbers: the fate of a launch is a function of the seed, the offer and the
    minute (and how many launches of that offer the minute saw), not of how many draws came
    before, so that two policies on one seed meet the same clouds."""
    gpu = OfferKey("gcp", "europe-west4", "n1-standard-8", "on-demand", "T4", 1)
    other = OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1)
    quiet, busy = (simulate.World([], {"V100": 8}, CFG, OFFERS, seed=7) for _ in range(2))
    for kind in ("shortage", "failure", "latency", "reclaim"):
        busy.draw(kind, other)  # another offer's launches earlier that minute
    busy.draw("latency", gpu)
    busy.now = quiet.now = 600.0
    for kind in ("shortage", "failure", "latency", "reclaim"):
        assert quiet.draw(kind, gpu).random() == busy.draw(kind, gpu).random()
    # The next launch of the same offer in the same minute draws anew; so does another seed.
    assert quiet.draw("latency", gpu).random() != busy.draw("latency", other).random()
    first = simulate.World([], {"V100": 8}, CFG, OFFERS, seed=7).draw("latency", gpu).random()
    again = simulate.World([], {"V100": 8}, CFG, OFFERS, seed=7)
    again.draw("latency", gpu)
    assert again.draw("latency", gpu).random() != first
    assert (
        simulate.World([], {"V100": 8}, CFG, OFFERS, seed=8).draw("latency", gpu).random() != first
    )


def test_no_pool_goes_while_a_job_runs_on_it() -> None:
    # Without spot, nothing may end a run early: a pool is deleted only once it is idle. (A node
    # that joined a busy pool used to come up "idle" and the pool was deleted under its jobs.)
    rng = random.Random(11)
    jobs = sorted(
        (
            job(str(i), t, d, g, t + 2 * d + 2400)
            for i in range(400)
            for t, d, g in [(rng.randint(0, 30_000), rng.randint(60, 9000), rng.choice((1, 2, 4)))]
        ),
        key=lambda j: (j.submit, j.job_id),
    )
    clouds = CloudModel(shortage=0.05, launch_failure=0.05, spot_interruptions_per_hour=0)
    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=2, clouds=clouds)
    out = world.run(simulate.Burst(CFG))
    assert out.burst_jobs > 50 and out.pools_created < out.burst_jobs  # pools were shared
    assert [j.spec.job_id for j in world.jobs if j.restarts] == []


class GrowOnePool:
    """A policy (the simulator's protocol) that puts queued jobs on one pool of 1-GPU nodes,
    created for the first job and grown by a node for each next one, launched or not; once that
    pool is gone, jobs wait for on-prem."""

    name = "grow-one-pool"

    def __init__(self) -> None:
        self.offer = next(
            o for o in OFFERS if o.gpus == 1 and o.capacity == "on-demand" and o.cloud == "gcp"
        )
        self.nodes = 0

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        return None

    def decide(self, world: simulate.World) -> list[Action]:
        zero, actions = Money.zero("USD"), []
        if self.nodes and "p" not in world.pools:
            return []  # the pool failed (or went): the jobs wait for on-prem
        for i in world.queued():
            if world.jobs[i].planned_pool is not None:
                continue
            self.nodes += 1
            if self.nodes == 1:
                offer = self.offer
                actions.append(CreatePool("p", "gcp", "ml", offer.key, 1, offer.hourly, "", zero))
            else:
                actions.append(ResizePool("p", self.nodes, "", zero))
            actions.append(Dispatch(str(i), "p", "gcp", "", zero, START))
        return actions


class OnePoolForAll:
    """A policy (the simulator's protocol) that creates one pool of one 8-GPU node at its first
    decision and plans every queued job onto it, busy or not (of `only`, those of these
    indices)."""

    name = "one-pool-for-all"

    def __init__(self, only: set[int] | None = None) -> None:
        self.only = only
        self.offer = next(
            o for o in OFFERS if o.gpus == 8 and o.capacity == "on-demand" and o.cloud == "gcp"
        )

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        return None

    def decide(self, world: simulate.World) -> list[Action]:
        zero, actions = Money.zero("USD"), []
        if not world.pool_list:
            offer = self.offer
            actions.append(CreatePool("p", "gcp", "ml", offer.key, 1, offer.hourly, "", zero))
        for i in world.queued():
            if world.jobs[i].planned_pool is None and (self.only is None or i in self.only):
                actions.append(Dispatch(str(i), "p", "gcp", "", zero, START))
        return actions


def test_a_job_planned_onto_a_busy_pool_starts_when_a_run_there_ends() -> None:
    # On-prem is taken for 10 h. a and b (8 GPUs, 1 h each) are planned onto one pool of one
    # 8-GPU node, up at 330 s: a runs from then, and b starts when a ends, at 3,930 s, as the
    # remote cluster's scheduler starts a pending pod once the pod holding its node is gone
    # (kubernetes pkg/scheduler/eventhandlers.go, deleteAssignedPodFromCache: an assigned pod's
    # delete moves the unschedulable pods back to the active queue; failing that, they are
    # retried after at most DefaultPodMaxInUnschedulablePodsDuration, 5 minutes,
    # pkg/scheduler/internal/queue/scheduling_queue.go). b used to wait for the next launch or
    # dispatch onto the pool, and a job planned onto a busy pool missed its deadline so.
    jobs = [job("hog", 0, 36_000, 8, 10**6), job("a", 10, 3600, 8, 10**6)]
    jobs.append(job("b", 20, 3600, 8, 10**6))
    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY)
    world.run(OnePoolForAll())
    a, b = world.jobs[1], world.jobs[2]
    assert len(world.pool_list) == 1 and a.ran_in_cloud and b.ran_in_cloud
    assert (a.started, b.started) == (330, 3930)


def test_the_job_behind_a_strict_queues_head_starts_when_the_head_leaves_for_a_cloud() -> None:
    # On-prem is one node of 8 GPUs, 4 of them taken for 10 h. a (8 GPUs) heads the strict
    # queue, and b (1 GPU) fits but waits behind it. a is planned onto a pool, up at 330 s, and
    # leaves the queue when it starts there (burst takes a Kueue job out of its queue when it
    # replicates it: kube/replicate.py); b starts on-prem at that moment, as Kueue's scheduler
    # takes the next head once the workload is deleted from its ClusterQueue (kueue
    # pkg/queue/manager.go, DeleteWorkload). b used to wait for the next arrival or on-prem end:
    # here the hog's, 10 h later.
    jobs = [job("hog", 0, 36_000, 4, 10**6), job("a", 10, 3600, 8, 10**6)]
    jobs.append(job("b", 20, 3600, 1, 10**6))
    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY)
    world.run(OnePoolForAll(only={1}))
    a, b = world.jobs[1], world.jobs[2]
    assert a.ran_in_cloud and not b.ran_in_cloud
    assert (a.started, b.started) == (330, 330)


def test_a_job_planned_onto_a_pool_that_is_up_leaves_the_on_prem_queue_at_once() -> None:
    # On-prem is one node of 8 GPUs, 4 of them taken until 1,800 s. x (8 GPUs) runs on a pool of
    # one 8-GPU node from 330 s to 3,930 s. a (8 GPUs, at 400 s) is planned onto that busy pool at
    # the 420 s tick, and b (1 GPU, at 410 s) waits behind a in the strict queue. The service
    # replicates a dispatch to a pool that is up at once (service/remote.py, dispatch_ready: a
    # ready or resizing pool), suspending the local copy and taking it out of Kueue's queue first
    # (kube/replicate.py); the copy waits in the remote cluster for room. So b starts on-prem at
    # 420 s, and a does not start on-prem when the hog's GPUs free at 1,800 s: it starts in the
    # cloud when x ends. a used to stay queued on-prem, holding b back, until it started there.
    jobs = [job("hog", 0, 1800, 4, 10**6), job("x", 10, 3600, 8, 10**6)]
    jobs += [job("a", 400, 3600, 8, 10**6), job("b", 410, 3600, 1, 10**6)]
    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY)
    world.run(OnePoolForAll(only={1, 2}))
    a, b = world.jobs[2], world.jobs[3]
    assert a.ran_in_cloud and not b.ran_in_cloud
    assert (a.started, b.started) == (3930, 420)


class Watched(simulate.World):
    """A replay that checks, at every decision, that no job planned onto a pool that is up fits
    the room that pool has (the remote scheduler would have started it) or is still in the
    on-prem queue (the service has copied it there), and that one planned onto a pool still
    launching is (the service copies it only once the pool is up)."""

    checked = 0

    def _decide(self, policy: simulate.Policy) -> None:
        queued = set(self.queued())
        for pool in self.pool_list:
            for i in pool.planned:
                if pool.state == "requested":
                    assert self.jobs[i].state == "queued" and i in queued, i
                    continue
                assert pool.state == "ready", (i, pool.state)
                assert self.jobs[i].state == "remote" and i not in queued, i
                spec = self.jobs[i].spec
                assert first_fit(pool.room(self.now), spec.gpus_per_pod, spec.pods) is None, i
                self.checked += 1
        super()._decide(policy)


def test_no_job_waits_on_a_pool_that_has_room_for_it() -> None:
    # Runs end, and spot nodes are reclaimed under jobs of several pods, whose pods on the other
    # nodes then let their GPUs go: planned work takes the room at once, whatever freed it.
    rng = random.Random(5)
    jobs = sorted(
        (
            SimJob(str(i), t, d, g * p, p, g, t + 3 * d + 3600, "cms-ml")
            for i in range(400)
            for t, d, g, p in [
                (
                    rng.randint(0, 20_000),
                    rng.randint(600, 9000),
                    rng.choice((1, 4, 8)),
                    rng.choice((1, 2)),
                )
            ]
        ),
        key=lambda j: (j.submit, j.job_id),
    )
    clouds = replace(STEADY, spot_interruptions_per_hour=0.5)
    reclaims = {}
    for policy in (simulate.Burst(CFG), baselines.no_wait(CFG, POLICY, OFFERS)):
        world = Watched(jobs, {"V100": 8}, CFG, OFFERS, seed=3, clouds=clouds)
        out = world.run(policy)
        assert out.burst_jobs > 50 and world.checked > 0, policy.name
        reclaims[policy.name] = world.interruptions
    assert reclaims["burst"] > 0  # burst runs on spot where a job has the slack (no-wait does not)


def test_a_launch_fails_or_comes_up_as_a_whole() -> None:
    # On-prem is taken by a for 10 h; the pool is created for b at the tick after 10 s and grown
    # for c at the tick after 100 s, while it still launches (nodes take 300 s). Half the launches
    # fail: over twenty seeds, each either fails with the node added to it (both jobs then run
    # on-prem after a), or comes up node by node with each job on its node at once. (A node added
    # to a launch that then succeeded could "fail" alone and sit unused while c waited for it.)
    jobs = [
        job("a", 0, 36_000, 8, 10**6),
        job("b", 10, 600, 1, 10**6),
        job("c", 100, 600, 1, 10**6),
    ]
    clouds = replace(STEADY, launch_failure=0.5)
    outcomes = set()
    for seed in range(20):
        world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=seed, clouds=clouds)
        world.run(GrowOnePool())
        pool, b, c = world.pool_list[0], world.jobs[1], world.jobs[2]
        assert len(world.pool_list) == 1 and len(pool.nodes) == 2
        if pool.state == "failed":
            assert world.failures == 1 and all(n.used_gpu_s == 0 for n in pool.nodes)
            assert not b.ran_in_cloud and not c.ran_in_cloud and b.started == 36_000
        else:
            assert (b.started, c.started) == (pool.nodes[0].ready_at, pool.nodes[1].ready_at)
            assert b.ran_in_cloud and c.ran_in_cloud and world.failures == 0
        outcomes.add(pool.state)
    assert outcomes == {"failed", "deleted"}


def test_the_same_seed_gives_the_same_result() -> None:
    rng = random.Random(3)
    jobs = sorted(
        (
            job(str(i), t, d, g, t + 3 * d + 2400)
            for i in range(300)
            for t, d, g in [
                (rng.randint(0, 40_000), rng.randint(60, 7200), rng.choice((1, 2, 4, 8)))
            ]
        ),
        key=lambda j: (j.submit, j.job_id),
    )
    clouds = CloudModel(shortage=0.2, launch_failure=0.1, spot_interruptions_per_hour=1)
    first = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=5, clouds=clouds).run(
        simulate.Burst(CFG)
    )
    again = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=5, clouds=clouds).run(
        simulate.Burst(CFG)
    )
    other = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=6, clouds=clouds).run(
        simulate.Burst(CFG)
    )
    assert first == again
    assert first != other
    assert first.burst_jobs > 0 and first.unfinished == 0


class EveryCloudEnd(simulate.Burst):
    """Burst, asked to decide at every cloud job's end as the service plans every pass."""

    def decide(self, world: simulate.World) -> list[Action]:
        actions = list(super().decide(world))
        self.more_from = 0.0
        return actions


@pytest.mark.parametrize(("lifetime", "seed"), [(None, 1), (None, 2), (1, 1), (1, 3)])
def test_a_cloud_end_decided_only_when_its_room_may_be_taken_replays_the_same(
    lifetime: int | None, seed: int
) -> None:
    """With exact runtimes a decision at a cloud job's end does what the next would only when
    the last left a job waiting for room, work on a pool late to launch, or the pool empty
    (clouds.CloudPools._freed_room_matters): the replay must come out the same with fewer. With
    pools past a lifetime of an hour, a pool a job's end empties goes at that end."""
    rng = random.Random(seed)
    jobs = sorted(
        (
            job(str(i), t, d, g, t + round(rng.uniform(1.2, 4) * d) + 600)
            for i in range(250)
            for t, d, g in [(rng.randint(0, 30_000), rng.randint(60, 7200), rng.choice((1, 2, 8)))]
        ),
        key=lambda j: (j.submit, j.job_id),
    )
    cfg = CFG
    if lifetime is not None:
        cfg = variants.with_teardown(CFG, POLICY.metadata.name, max_lifetime=lifetime * HOUR)
    # Launches with a heavy tail: some come past their estimate, with work planned onto them.
    tail = {c: Latency(median_s=300, sigma=1.0, cap_s=7200) for c in CLOUDS}
    clouds = CloudModel(
        shortage=0.1, launch_failure=0.1, spot_interruptions_per_hour=0.5, latency=tail
    )
    fewer, every = (
        simulate.World(jobs, {"V100": 16}, cfg, OFFERS, seed=seed, clouds=clouds).run(policy)
        for policy in (simulate.Burst(cfg), EveryCloudEnd(cfg))
    )
    assert fewer.burst_jobs > 0 and fewer.decisions < every.decisions
    assert replace(fewer, decisions=0) == replace(every, decisions=0)


def test_a_quiet_hour_does_not_let_a_queued_job_miss_its_deadline() -> None:
    """The service plans every pass; the replay decides on events, and wakes burst at the last
    moment a queued job's deadline trigger can fire. Without that wake, OpenB's window with a
    price on waiting (jobs leaving and rejoining the queue as pools come and go) left six jobs
    queued on-prem through a quiet hour past their deadlines."""
    from decimal import Decimal
    from importlib import resources
    from pathlib import Path

    from burst.sim import trace

    cfg = config.load(
        [ROOT / "docs" / "examples" / "simulate"],
        config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()),
    )
    policy = simulate.policy_of(cfg)
    shipped = resources.files("burst").joinpath("data", "traces", "alibaba-openb-2023-public.csv")
    raw = trace.read(Path(str(shipped)))
    jobs = trace.derive(
        raw,
        teams=policy.spec.selector.namespaces,
        slack=trace.slack_rule("uniform:1.5:4"),
        seed=1,
    )
    priced = variants.with_trigger(cfg, policy.metadata.name, wait_price=Decimal("0.8"))
    assert cfg.service is not None
    offers = SHIPPED.with_overrides(cfg.service.spec.catalog)
    world = simulate.World(jobs, {"V100": trace.onprem_gpus(raw)}, priced, offers, seed=1)
    assert world.run(simulate.Burst(priced)).deadlines_met == 1.0


def test_a_queued_job_is_woken_when_its_wait_per_gpu_hour_is_up() -> None:
    """With trigger.waitPerGpuHour a queued job bursts once it has waited its share, even when
    nothing else happens then: a 1-GPU hour behind a 10-hour job that holds every on-prem GPU
    waits its minute (to the next pass), not the policy's six-hour maximum wait."""
    jobs = [job("a", 0, 36000, 8, 10**6), job("b", 60, 3600, 1, 10**6)]
    name = POLICY.metadata.name
    sized = variants.with_trigger(CFG, name, wait_per_gpu_hour=timedelta(minutes=1))
    _, plain = replay(simulate.Burst(CFG), jobs)
    _, woken = replay(simulate.Burst(sized), jobs)
    assert plain.burst_jobs == woken.burst_jobs == 1
    # b waits its minute, the pass after it, and a five-minute launch: under ten minutes.
    assert woken.mean_queue_s * 2 < 600 < plain.mean_queue_s * 2


def test_replays_run_alike_in_turn_in_local_processes_and_on_dask() -> None:
    """`burst simulate --workers N` and `--dask ADDRESS` run the same replays elsewhere, through one
    interface (a concurrent.futures Executor), and give the same comparison."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from distributed import Client, LocalCluster

    jobs = [job(f"j{i}", 600 * i, 3600, 8, 600 * i + 3 * 3600) for i in range(12)]

    def run(executor: object = None) -> dict[str, object]:
        result = compare.compare(
            "t", jobs, {"V100": 8}, CFG, POLICY, OFFERS, seed=1, slack="fixed:3",
            include_baselines=True, clouds=STEADY, executor=executor,  # type: ignore[arg-type]
        )  # fmt: skip
        return compare.summary(result, CFG)

    alone = run()
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        assert run(pool) == alone
    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        assert run(client.get_executor()) == alone


def test_what_burst_is_told_of_runtimes_changes_its_decisions_not_the_jobs() -> None:
    """`--runtimes`: exact, a user's noisy guess, learned from the jobs that finished, or none (the
    policy's default). The jobs run as long as they do whatever burst is told."""
    jobs = [job(f"train-{i}", 900 * i, 1800 + 60 * i, 8, 900 * i + 3 * 3600) for i in range(10)]

    def replay_told(mode: str) -> tuple[object, list[int | None]]:
        world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY, runtimes=mode)  # type: ignore[arg-type]
        out = world.run(simulate.Burst(CFG))
        return out, [world.told.get(i) for i in range(len(jobs))]

    exact, told = replay_told("exact")
    assert told == [j.duration for j in jobs]
    _, guessed = replay_told("noisy")
    assert guessed != told and all(g is not None and g > 0 for g in guessed)
    _, none = replay_told("none")
    assert none == [None] * len(jobs)
    _, learned = replay_told("learned")
    assert learned[0] is None  # nothing had finished yet
    assert any(t is not None for t in learned)  # later ones learned from those before
    assert exact == replay(simulate.Burst(CFG), jobs)[1]  # exact is the default


def test_a_learned_runtime_is_told_no_longer_than_the_jobs_deadline_allows() -> None:
    """As the service learns it (runtimes.Learned): three runs of `train` took 10,000 s; the
    fourth, due 2,000 s after it is submitted, is told those 2,000 s, and without the three
    runs nothing."""
    jobs = [job(f"train-{i + 1}", 20_000 * i, 10_000, 8, 100_000) for i in range(3)]
    jobs.append(job("train-4", 70_000, 600, 8, 72_000))
    world = simulate.World(
        jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY, runtimes="learned"
    )
    assert state.told_runtime(world, 3) is None  # nothing has finished yet
    world.told.clear()
    world.run(simulate.Burst(CFG))
    world.told.clear()
    assert state.told_runtime(world, 3) == 2_000
    # A reuse is weighed at the longest of the runs as well: it may take as long as they did.
    assert world.workload(3).longest_runtime == timedelta(seconds=10_000)


def test_each_product_on_prem_runs_the_jobs_that_ask_for_it() -> None:
    # 8 V100s and 8 T4s: 1-GPU jobs of an hour, two a minute, never burst. Every job queued for
    # the V100s before; now about half ask for the T4s, and both products run work.
    jobs = [job(f"j{i:03d}", 30 * i, 3600, 1, 10**6) for i in range(200)]
    world = simulate.World(jobs, {"V100": 8, "T4": 8}, CFG, OFFERS, seed=1, clouds=STEADY)
    world.run(baselines.Never())
    asked = {a: world.asks.count(a) for a in ("V100", "T4")}
    assert 70 < asked["T4"] < 130 and asked["V100"] + asked["T4"] == 200
    assert all(j.finished is not None for j in world.jobs)
    # Both products busy: the last job ends about when 200 GPU-hours on 16 GPUs take, not 8.
    assert max(j.finished for j in world.jobs) < 15 * 3600
    # The decision sees what each asks for and where its pods run.
    assert {world.workload(i).accelerator for i in range(200)} == {"V100", "T4"}


def test_the_margin_is_chosen_against_how_much_longer_jobs_ran_than_told() -> None:
    """Learned runtimes: three runs of `train` take 100 s each. Then `block` (8 GPUs, as they
    were) is told 100 s from the namespace's 8-GPU runs and runs 1,000 s; `train-4`, queued
    behind it, is told 100 s and runs 400 s. Nine in ten of those two overran by at most 900 s:
    a margin of 15 minutes. Exact runtimes are never outrun; told none, nothing is measured."""
    jobs = [job(f"train-{i + 1}", 200 * i, 100, 8, 100_000) for i in range(3)]
    jobs += [job("block", 1000, 1000, 8, 100_000), job("train-4", 1100, 400, 8, 100_000)]
    outcomes = {}
    for mode in ("learned", "exact", "none"):
        world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY, runtimes=mode)
        outcomes[mode] = world.run(simulate.Burst(CFG))
    assert outcomes["learned"].overrun_p90_s == 900
    assert variants.measured_margin(outcomes["learned"]) == timedelta(minutes=15)
    # As shares of what each was told: 9 (900 s of 100) and 3 (300 of 100).
    assert outcomes["learned"].overrun_share_p90 == 9.0
    assert variants.measured(outcomes["learned"], "measured-share") == (timedelta(0), 9.0)
    assert variants.measured_margin(outcomes["exact"]) == timedelta(0)
    assert variants.measured_margin(outcomes["none"]) is None


def test_a_margin_is_a_duration_or_a_share_of_each_runtime() -> None:
    assert variants.parse_margin("30m") == (timedelta(minutes=30), 0.0)
    assert variants.parse_margin("25%") == (timedelta(0), 0.25)
    for bad in ("1001%", "-5%", "nan%", "soon"):
        with pytest.raises(ValueError, match="--margin: "):
            variants.parse_margin(bad)
    assert variants.worded(timedelta(minutes=30), 0.0) == "30m"
    assert variants.parse_runtime_share("0.5") == 0.5
    for bad in ("0", "1.5", "nan", "half"):
        with pytest.raises(ValueError, match="--deadline-runtime-share: "):
            variants.parse_runtime_share(bad)
    assert variants.worded(timedelta(0), 0.88) == "88 % of each runtime"


def test_a_run_lost_on_spot_is_not_sent_to_spot_again() -> None:
    """OpenB with learned estimates: a run of 200 hours, told 21 minutes, was sent to spot for its
    deadline, lost there, queued again and sent to spot again, nineteen times. A lost run now
    comes back to the decision as the service's requeued workloads do (`lost_copy`), and the
    decision keeps it off spot under `spot-if-slack`."""
    cfg = config.load(
        [ROOT / "docs" / "examples" / "simulate"],
        config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()),
    )
    assert cfg.service is not None
    offers = SHIPPED.with_overrides(cfg.service.spec.catalog)
    day = 24 * 3600
    # The cluster is held for days; x (3 h, its deadline 2.5 days away) has the slack for spot.
    jobs = [job("hog", 0, 4 * day, 8, 10 * day), job("x", 60, 3 * 3600, 1, 60 + 60 * 3600)]
    # Reclaimed within minutes; the decision prices spot at its target's 0.05 an hour.
    clouds = replace(STEADY, spot_interruptions_per_hour=6.0)
    world = simulate.World(jobs, {"V100": 8}, cfg, offers, seed=1, clouds=clouds)
    out = world.run(simulate.Burst(cfg))
    x = next(j for j in world.jobs if j.spec.job_id == "x")
    capacities = [p.offer.capacity for p in world.pool_list]
    assert x.restarts == 1 and out.unfinished == 0
    assert capacities[0] == "spot" and set(capacities[1:]) == {"on-demand"}, capacities


def test_on_the_ideal_clouds_burst_plans_for_their_instant_launch() -> None:
    """The targets' launch estimates are written for real clouds (the shipped config states none:
    8 to 12 minutes by default); on clouds that launch at once, a job that on-prem would start
    five minutes later is sooner in a cloud, from the next tick, once the targets say so."""
    from decimal import Decimal

    from burst.sim.state import IDEAL_CLOUDS

    hog = job("hog", 0, 300, 8, 10**6)
    short = job("short", 10, 600, 1, 10**6)
    priced = variants.with_trigger(CFG, POLICY.metadata.name, wait_price=Decimal("1000"))
    starts = {}
    for cfg in (priced, variants.stated(priced, IDEAL_CLOUDS)):
        world = simulate.World([hog, short], {"V100": 8}, cfg, OFFERS, seed=1, clouds=IDEAL_CLOUDS)
        world.run(simulate.Burst(cfg))
        starts[cfg is priced] = (world.jobs[1].started, world.jobs[1].ran_in_cloud)
    assert starts == {True: (300, False), False: (world.tick, True)}  # the tick after it came
    assert variants.stated(priced, STEADY) is priced  # a model that launches as configured

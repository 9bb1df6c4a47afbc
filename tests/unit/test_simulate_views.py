"""views.py: the queue and pool views the replay keeps across decisions are, at every decision, what
building them from scratch gives: on a window of Philly with clouds that refuse, fail and interrupt,
and on a case worked out by hand where a pool changes by one event alone between two decisions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cache

import pytest

from burst import config
from burst.amounts import Money
from burst.cloud import catalog
from burst.model import CLOUDS, Action, CreatePool, Dispatch, ResizePool
from burst.sim import baselines, simulate, trace
from burst.sim.state import START, CloudModel, RuntimeMode
from burst.sim.trace import SimJob
from burst.sim.views import rebuilt_pool_views
from providers.sim import Latency
from tests.conftest import ROOT

SHIPPED = catalog.shipped()
CFG = config.load(
    [ROOT / "docs" / "examples" / "simulate"],
    config.Vocabulary(SHIPPED.regions(), SHIPPED.accelerators()),
)
assert CFG.service is not None
OFFERS = SHIPPED.with_overrides(CFG.service.spec.catalog)
POLICY = simulate.policy_of(CFG)
# Clouds that misbehave often, so that every event a view depends on happens in a short window.
ROUGH = CloudModel(shortage=0.1, launch_failure=0.2, spot_interruptions_per_hour=0.5)
# Clouds that answer in exactly five minutes and never fail.
STEADY = CloudModel(
    shortage=0,
    launch_failure=0,
    spot_interruptions_per_hour=0,
    latency={c: Latency(median_s=300, sigma=0, cap_s=3600) for c in CLOUDS},
)


@cache
def philly(jobs: int) -> list[SimJob]:
    raw = trace.read(ROOT / "burst" / "data" / "traces" / "microsoft-philly-2017-public.csv")
    return trace.derive(
        raw[:jobs],
        teams=POLICY.spec.selector.namespaces,
        slack=(1.5, 4.0),
        seed=1,
    )


class Checked:
    """A policy that, before deciding as `inner` does, checks the kept views against a rebuild."""

    def __init__(self, inner: simulate.Policy) -> None:
        self.inner, self.name, self.checks = inner, inner.name, 0
        self.overran = 0  # decisions that saw a cloud run past the runtime told

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        return self.inner.wake_at(job, runtime)

    def decide(self, world: simulate.World) -> Sequence[Action]:
        fits = sorted(i for i in world.waiting if i not in world.never_fits)
        assert world.queued() == fits + sorted(world.waiting & world.never_fits)
        expected = tuple(
            replace(
                world.workload(i),
                phase="pending" if world.jobs[i].planned_pool is None else "planned",
                planned_pool=getattr(world.jobs[i].planned_pool, "name", None),
                lost_copy=world.jobs[i].restarts > 0,
            )
            for i in world.queued()
        )
        assert world.queued_workloads() == expected
        views = rebuilt_pool_views(world)
        assert world.pool_views() == views
        assert world.pools_with_room() == [v for v in views if any(v.free_gpus)]
        idle = [p for p in world.pools.values() if p.idle_since is not None]
        assert world.idle_pools() == idle
        self.checks += 1
        runs = [i for p in world.pools.values() for n in p.alive for i in n.jobs]
        self.overran += any(world.jobs[i].told_end < world.now for i in runs)
        return self.inner.decide(world)


@pytest.mark.parametrize(
    ("policy", "runtimes"),
    [
        (simulate.Burst(CFG), "exact"),
        # Guesses: cloud runs go past the runtime told, and their pools' views move with the clock.
        (simulate.Burst(CFG), "noisy"),
        (baselines.no_wait(CFG, POLICY, OFFERS), "exact"),
        (baselines.compute_wait(CFG, POLICY, OFFERS, philly(1500)), "exact"),
    ],
    ids=lambda p: getattr(p, "name", p),
)
def test_the_kept_views_are_the_rebuilt_ones_at_every_decision(
    policy: simulate.Policy, runtimes: RuntimeMode
) -> None:
    jobs = philly(1500)
    checked = Checked(policy)
    world = simulate.World(jobs, {"V100": 96}, CFG, OFFERS, seed=2, clouds=ROUGH, runtimes=runtimes)
    out = world.run(checked)
    assert checked.checks == out.decisions > 100
    # The window saw what the views follow: pools refused, failed, interrupted, shared and let go.
    assert out.burst_jobs > 100 and out.pools_created > 10
    assert out.capacity_refusals and out.launch_failures
    if policy.name == "burst":
        assert out.interruptions  # only burst takes spot
    if runtimes == "noisy":
        assert checked.overran > 0
    # And the replay did the same as without the checks.
    again = simulate.World(
        jobs, {"V100": 96}, CFG, OFFERS, seed=2, clouds=ROUGH, runtimes=runtimes
    ).run(policy)
    assert replace(again, decisions=out.decisions) == out


def _job(name: str, submit: int, duration: int, gpus: int) -> SimJob:
    """A one-pod job of the cms-ml team, due a million seconds into the replay (never late here)."""
    return SimJob(name, submit, duration, gpus, 1, gpus, 10**6, "cms-ml")


class Scripted:
    """At t=60 a pool of two 1-GPU nodes for the queued jobs; at t=120 a third node for none."""

    name = "scripted"

    def wake_at(self, job: SimJob, runtime: int) -> float | None:
        return None

    def decide(self, world: simulate.World) -> list[Action]:
        zero = Money.zero("USD")
        offer = next(
            o for o in OFFERS if o.gpus == 1 and o.capacity == "on-demand" and o.cloud == "gcp"
        )
        if world.now == 60:
            create = CreatePool("p", "gcp", "ml", offer.key, 2, offer.hourly, "", zero)
            return [create] + [
                Dispatch(str(i), "p", "gcp", "", zero, START) for i in world.queued()
            ]
        if world.now == 120:
            return [ResizePool("p", 3, "", zero)]
        return []


def test_a_pool_grown_or_left_by_a_job_between_decisions_is_seen_so() -> None:
    # On-prem: 7 of 8 GPUs busy for a day, the eighth until t=250. b and c queue, and are put on
    # a pool at t=60 that is up at t=360; the pool grows by a node at t=120 with nothing for it;
    # b starts on-prem at t=250 and leaves the pool to c. Each decision after one change alone
    # (e's at t=180, f's at t=300) sees the pool as it is then.
    jobs = [
        _job("hog", 0, 86_400, 7),
        _job("short", 0, 250, 1),
        _job("b", 10, 600, 1),
        _job("c", 20, 600, 1),
        _job("d", 100, 600, 1),
        _job("e", 130, 600, 1),
        _job("f", 260, 600, 1),
        _job("g", 400, 600, 1),
    ]
    seen: dict[float, list[tuple[int, tuple[int, ...]]]] = {}
    ends: dict[float, list[tuple[datetime | None, ...]]] = {}

    class Watching(Checked):
        def decide(self, world: simulate.World) -> Sequence[Action]:
            actions = super().decide(world)  # checked against a rebuild first
            seen[world.now] = [(v.nodes, v.free_gpus) for v in world.pool_views()]
            ends[world.now] = [v.busy_until for v in world.pool_views()]
            return actions

    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY)
    world.run(Watching(Scripted()))
    # Three nodes, two held for b and c; then only c's (planned work holds room first fit).
    assert seen[180] == [(3, (0, 0, 1))] and seen[300] == [(3, (0, 1, 1))]
    # Planned work not started is expected to end a runtime from now, as the service dates a
    # copy not seen running (service/loop.py): the nodes come up at t=360, after both decisions.
    at_180, at_300 = (START + timedelta(seconds=t + 600) for t in (180, 300))
    assert ends[180] == [(at_180, at_180, None)] and ends[300] == [(at_300, None, None)]
    # Once c runs (from t=360, when the nodes came up), a runtime after its start: at the tick
    # after g queues.
    assert ends[420] == [(START + timedelta(seconds=360 + 600), None, None)]
    assert world.jobs[2].started == 250 and not world.jobs[2].ran_in_cloud
    assert world.jobs[3].ran_in_cloud


def test_a_ready_pools_new_nodes_are_seen_on_their_way_until_they_are_up() -> None:
    # On-prem full for a day: b and c go to a pool of two nodes at t=60, up at t=360 (five
    # minutes). At the decision of t=420 (d's arrival, decisions come each minute) it grows by a
    # node, up at t=720: the decision between (e's, t=540) sees two of its three nodes up and the
    # third asked for at t=420, as the service shows a resizing pool (the decision dates work
    # there from when it is expected up); the one after (f's, t=840) sees all three up.
    jobs = [_job("hog", 0, 86_400, 8), _job("b", 10, 3000, 1), _job("c", 20, 3000, 1)]
    jobs += [_job(name, t, 600, 1) for name, t in (("d", 400), ("e", 500), ("f", 800))]
    seen: dict[float, list[tuple[int, int | None, datetime | None]]] = {}

    class Growing(Scripted):
        def decide(self, world: simulate.World) -> list[Action]:
            seen[world.now] = [(v.nodes, v.nodes_up, v.resized_at) for v in world.pool_views()]
            if world.now == 420:
                return [ResizePool("p", 3, "", Money.zero("USD"))]
            return super().decide(world) if world.now == 60 else []

    world = simulate.World(jobs, {"V100": 8}, CFG, OFFERS, seed=1, clouds=STEADY)
    world.run(Checked(Growing()))
    assert seen[420] == [(2, None, None)]
    assert seen[540] == [(3, 2, START + timedelta(seconds=420))]
    assert seen[840] == [(3, None, None)]

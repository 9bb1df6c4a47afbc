"""What burst charges for a pool against what its cloud bills: every node instance from its launch
to its end, each with its own minimum (AWS Linux and GCP: per second, 60 s minimum, see
burst/money/meter.py). The simulated cloud keeps each instance's launch and end, as a cloud's
instance API does; burst meters from what it reports. The soak found pools whose ledger was short
of this: a reclaimed spot node's replacement billed as the same instance, a resize's nodes billed
from when they were ready rather than launched, a failed launch billed only to the failure when
its deletion was refused."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from burst.amounts import Money
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.cloud.catalog import UnavailableOffers
from burst.cloud.provider import Throttled
from burst.cloud.provision import Provisioner, pool_views, take_failed
from burst.model import CreatePool, OfferKey
from burst.money.meter import BILLING
from burst.service.teardown import Teardown
from burst.store.tables import LedgerEntry, Pool
from providers.sim import SimCloud, SimProvider, SimSettings
from tests.integration.test_pool_lifecycle import one_target_config, sessions_in

SHIPPED = catalog.shipped()
SPOT = OfferKey("aws", "eu-central-1", "g6.24xlarge", "spot", "L4", 4)
ON_DEMAND = OfferKey("aws", "eu-central-1", "g6.24xlarge", "on-demand", "L4", 4)
MINUTE = timedelta(minutes=1)


@dataclass
class World:
    clock: FakeClock
    cloud: SimCloud
    sim: SimProvider
    sessions: sessionmaker[Session]
    provisioner: Provisioner
    teardown: Teardown

    def create(self, name: str, offer: OfferKey, nodes: int) -> None:
        price = SHIPPED.get(offer)
        assert price is not None
        action = CreatePool(name, "sim-aws", "p", offer, nodes, price.hourly, "", Money.zero("USD"))
        with self.sessions() as s:
            self.provisioner.create(s, action)

    def passes(self, n: int, step: timedelta = MINUTE) -> None:
        for _ in range(n):
            self.clock.advance(step)
            with self.sessions() as s:
                self.provisioner.refresh(s)
                for failed in take_failed(self.provisioner, s):
                    self.teardown.meter_pool(s, failed)
                for pool in self.provisioner.deleting(s):  # as the service's pass does
                    self.teardown.delete_pool(s, pool.name, pool.state_reason or "deleting")

    def assert_billed(self, name: str, offer: OfferKey) -> None:
        """The ledger is the bill to the micro-unit each of its series (usage, idle, overhead)
        is rounded down by."""
        charged, billed = self.charged(name), self.billed(name, offer)
        assert abs(charged - billed) <= 3, (charged, billed)

    def charged(self, name: str) -> int:
        with self.sessions() as s:
            total = s.scalar(
                select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0)).where(
                    LedgerEntry.pool == name
                )
            )
        return int(total)

    def billed(self, name: str, offer: OfferKey) -> int:
        """The cloud's bill: each instance from launch to end, rounded up by the billing rule."""
        pool = self.cloud._pools[("sim-aws", name)]
        rule, price = BILLING["aws"], SHIPPED.get(offer)
        assert price is not None
        seconds = 0
        for node in [*pool.gone, *pool.nodes]:
            assert node.launched is not None and node.ended is not None, node
            seconds += rule.billable((node.ended - node.launched).total_seconds())
        return price.hourly.micros * seconds // 3600


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    clock = FakeClock()
    speed = getattr(request, "param", 1)
    cloud = SimCloud(clock, seed=1, settings=SimSettings(speed=speed))
    sim = SimProvider(
        cloud, target="sim-aws", cloud="aws", region="eu-central-1", offers=lambda: list(SHIPPED)
    )
    engine, sessions = sessions_in(tmp_path)
    provisioner = Provisioner({"sim-aws": sim}, clock, UnavailableOffers(clock), "burst-demo")
    teardown = Teardown(
        config=one_target_config(tmp_path),
        clock=clock,
        sessions=sessions,
        local=None,  # type: ignore[arg-type]  # no workloads: nothing to annotate
        provisioner=provisioner,
        syncer=None,  # type: ignore[arg-type]
    )
    yield World(clock, cloud, sim, sessions, provisioner, teardown)
    engine.dispose()


def throttled(*args: Any, **kwargs: Any) -> None:
    """A cloud call refused for its rate (a 429 with Retry-After)."""
    raise Throttled("429 Too Many Requests", retry_after=1)


def delete(world: World, name: str) -> None:
    with world.sessions() as s:
        world.teardown.delete_pool(s, name, "idle")


@pytest.mark.parametrize("world", [120], indirect=True)  # the soak's launches: pools under 60 s
def test_a_reclaimed_spot_node_and_its_replacement_are_billed_as_two(world: World) -> None:
    world.create("reclaimed", SPOT, 1)
    world.passes(1, timedelta(seconds=8))  # ready
    world.clock.advance(timedelta(seconds=5))
    assert world.sim.interrupt("reclaimed")  # a replacement boots in its place
    world.clock.advance(timedelta(seconds=10))
    delete(world, "reclaimed")
    # Two instances of under a minute: two minimums, where one was charged before.
    world.assert_billed("reclaimed", SPOT)
    assert world.billed("reclaimed", SPOT) == SHIPPED.get(SPOT).hourly.micros * 120 // 3600  # type: ignore[union-attr]


def test_a_grown_pools_new_nodes_are_billed_from_their_launch(world: World) -> None:
    world.create("grown", ON_DEMAND, 1)
    world.passes(40)
    with world.sessions() as s:
        world.provisioner.resize(s, "grown", 3)
    world.passes(40)
    delete(world, "grown")
    world.assert_billed("grown", ON_DEMAND)


def test_a_failed_launch_whose_deletion_was_refused_counts_as_up_and_is_billed_until_it_went(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.cloud.settings.failure_rate = 1.0
    world.create("failed", ON_DEMAND, 2)

    with monkeypatch.context() as m:
        m.setattr(world.sim, "delete_pool", throttled)
        world.passes(60)
        # Its nodes run: the plan counts it against maxPools, as a pool being deleted.
        with world.sessions() as s:
            assert [(v.name, v.state) for v in pool_views(s, {}, {})] == [("failed", "deleting")]
    world.passes(1)  # the deletion asked again, and taken, an hour later: billed until then
    assert world.cloud._pools[("sim-aws", "failed")].deleted
    world.assert_billed("failed", ON_DEMAND)


@pytest.mark.parametrize("world", [120], indirect=True)
def test_a_pool_deleted_out_of_band_is_billed_for_the_instances_listed_before(
    world: World,
) -> None:
    """Its last look was at its launch; the orphan scan lists every pool with its instances, so
    a replacement seen there is billed when the pool goes behind burst's back."""
    world.create("gone", SPOT, 1)
    world.passes(1, timedelta(seconds=8))
    world.clock.advance(timedelta(seconds=5))
    assert world.sim.interrupt("gone")
    world.clock.advance(timedelta(seconds=20))
    world.teardown.collect_orphans()  # lists it, with both instances
    world.sim.delete_pool("gone", by="operator")
    world.teardown.collect_orphans()  # finds it gone: closed and metered
    world.assert_billed("gone", SPOT)


def test_a_pool_deleted_out_of_band_is_billed_to_its_instances_end_not_to_when_burst_saw_it(
    world: World,
) -> None:
    """A scan that runs late (minutes, under load) finds the pool gone long after the cloud ended
    its instances; the cloud still lists them with their ends, and the ledger follows the cloud."""
    world.create("late", ON_DEMAND, 2)
    world.passes(10)
    world.sim.delete_pool("late", by="operator")
    world.clock.advance(timedelta(minutes=25))
    world.teardown.collect_orphans()
    world.assert_billed("late", ON_DEMAND)


@pytest.mark.parametrize("ends_refused", [False, True])
def test_a_deletion_seen_done_a_pass_late_is_billed_to_the_clouds_end(
    world: World, monkeypatch: pytest.MonkeyPatch, ends_refused: bool
) -> None:
    """The cloud took the delete and ended the nodes; the look that would see it gone was
    throttled, and the next pass came ten minutes later. `ends_refused`: that pass's ask for
    the ended instances was throttled too (run 13: billed to when burst looked, 12 s past the
    cloud's end); the pool stays being deleted until the cloud answers, and is billed to the
    end it gives."""
    world.create("slow", ON_DEMAND, 1)
    world.passes(10)
    with monkeypatch.context() as m:
        m.setattr(world.sim, "get_pool", throttled)
        delete(world, "slow")
    world.clock.advance(timedelta(minutes=10))
    if ends_refused:
        with monkeypatch.context() as m:
            m.setattr(world.sim, "ended_instances", throttled)
            delete(world, "slow")
        world.clock.advance(timedelta(minutes=1))
    delete(world, "slow")
    world.assert_billed("slow", ON_DEMAND)


def test_a_pool_that_failed_in_a_pass_that_died_is_metered_by_the_next(world: World) -> None:
    """The pass that saw the launch fail died before metering it (the database went away: its
    session rolled back); the next pass, in a new session, meters it. The soak's passes raised
    DetachedInstanceError on the first pass's row."""
    world.cloud.settings.failure_rate = 1.0
    world.create("died", ON_DEMAND, 2)
    with world.sessions() as s:
        world.clock.advance(timedelta(minutes=50))  # past the launch timeout
        world.provisioner.refresh(s)
        assert world.provisioner.failed == ["died"]
        s.execute(select(LedgerEntry.id))  # the pass goes on, and its next statement fails:
        s.rollback()
    world.passes(1)  # meters it
    world.teardown.collect_orphans(grace=timedelta(0))
    world.assert_billed("died", ON_DEMAND)


def test_a_pool_gone_behind_bursts_back_whose_ends_the_cloud_will_not_give_yet_is_billed_later(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan finds the pool gone 25 minutes after its deletion, and the cloud throttles the
    ask for its instances' ends: it is closed as a deletion under way, and the next pass bills
    it to the ends the cloud then gives."""
    world.create("vanished", ON_DEMAND, 2)
    world.passes(10)
    world.sim.delete_pool("vanished", by="operator")
    world.clock.advance(timedelta(minutes=25))

    asked: list[str] = []

    def throttled_asks(*args: Any, **kwargs: Any) -> None:
        asked.append("ended_instances")
        throttled()

    with monkeypatch.context() as m:
        m.setattr(world.sim, "ended_instances", throttled_asks)
        world.teardown.collect_orphans()
    # A throttled cloud is asked again on the next pass, not twice more in this one (each ask is
    # retried with back-off inside the provider: a pass stalled on a cloud that said "later").
    assert asked == ["ended_instances"]
    with world.sessions() as s:
        assert s.scalar(select(Pool.state).where(Pool.name == "vanished")) == "deleting"
    world.passes(1)
    world.assert_billed("vanished", ON_DEMAND)


def test_the_plans_view_shows_pools_being_drained_or_deleted(tmp_path: Path) -> None:
    """The plan counts a pool against maxPools until the cloud has deleted it, but the service
    showed it only requested, creating, ready or resizing pools: the soak on that count's fix
    still saw seven pools up where the policy allows six."""
    from tests.builders import pool_row

    engine, sessions = sessions_in(tmp_path)
    with sessions() as s:
        for name, state in (("up", "ready"), ("idle", "draining"), ("going", "deleting")):
            s.add(pool_row(name=name, state=state))
        s.add(pool_row(name="gone", state="deleted"))
        s.commit()
        views = {v.name: v.state for v in pool_views(s, {}, {})}
    engine.dispose()
    assert views == {"up": "ready", "idle": "draining", "going": "deleting"}


def test_the_decision_sees_when_each_nodes_work_ends_while_every_runtime_is_known(
    world: World,
) -> None:
    world.create("p", ON_DEMAND, 2)  # two nodes of 4 L4
    now, hour = world.clock.now(), timedelta(hours=1)
    with world.sessions() as s:
        # Pods of 3, 2 and 1 GPUs, placed first fit as the view counts them: 3 and 1 on the
        # first node, 2 on the second.
        used = {"p": [(3, now + hour), (2, now + 3 * hour), (1, now + 2 * hour)]}
        (view,) = pool_views(s, used, {})
        assert view.free_gpus == (0, 2)
        assert view.busy_until == (now + 2 * hour, now + 3 * hour)
        # One pod whose end nobody knows: no node's end is shown (a reuse is priced as before).
        (view,) = pool_views(s, {"p": [*used["p"], (1, None)]}, {})
        assert view.busy_until == ()


def test_the_decision_sees_a_resizing_pools_new_nodes_on_their_way_until_it_is_ready(
    world: World,
) -> None:
    # A resizing pool runs its jobs, so the decision takes it as ready; work placed on the nodes the
    # resize adds starts when they are up, not now: the view says how many are up and since when the
    # rest are on their way (the resize's own clock, as _follow_resize keeps it).
    world.create("p", ON_DEMAND, 1)
    _until_ready(world)
    with world.sessions() as s:
        (view,) = pool_views(s, {}, {})
        assert (view.state, view.nodes, view.nodes_up, view.resized_at) == ("ready", 1, None, None)
        world.provisioner.resize(s, "p", 3)
        asked = world.clock.now()
    world.passes(1)
    with world.sessions() as s:
        assert s.scalar(select(Pool.state)) == "resizing"
        (view,) = pool_views(s, {}, {})
        assert (view.state, view.nodes, view.nodes_up, view.resized_at) == ("ready", 3, 1, asked)
    _until_ready(world)
    with world.sessions() as s:
        (view,) = pool_views(s, {}, {})
        assert (view.nodes, view.nodes_up, view.resized_at) == (3, None, None)
        # Shrunk, nothing is on its way.
        world.provisioner.resize(s, "p", 2)
        (view,) = pool_views(s, {}, {})
        assert (view.nodes, view.nodes_up) == (2, None)


def _until_ready(world: World) -> None:
    """Passes until the one pool is ready (the simulated launch takes minutes)."""
    for _ in range(30):
        world.passes(1)
        with world.sessions() as s:
            if s.scalar(select(Pool.state)) == "ready":
                return
    raise AssertionError("not ready after 30 passes")

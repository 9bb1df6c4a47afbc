"""The simulated cloud on a fake clock: latency, capacity, failures and spot interruptions,
reproducible from a seed."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from burst.clock import FakeClock
from burst.cloud import catalog
from burst.cloud.provider import CapacityUnavailable, InvalidRequest, PoolNotFound, PoolSpec
from burst.model import OfferKey
from providers.sim import LATENCY, SimCloud, SimProvider, SimSettings

SPOT = OfferKey("gcp", "europe-west4", "n1-standard-8", "spot", "T4", 1)
ON_DEMAND = OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1)


def spec(
    name: str = "p", offer: OfferKey = ON_DEMAND, nodes: int = 2, owner: str = "me"
) -> PoolSpec:
    return PoolSpec(name=name, offer=offer, nodes=nodes, owner=owner, policy="ml", epoch=1)


def sim(seed: int = 1, cloud: str = "aws", **settings: object) -> tuple[FakeClock, SimProvider]:
    clock = FakeClock()
    world = SimCloud(clock, seed=seed, settings=SimSettings(**settings))  # type: ignore[arg-type]
    region = "eu-central-1" if cloud == "aws" else "europe-west4"
    return clock, SimProvider(
        world,
        target=f"{cloud}-t",
        cloud=cloud,
        region=region,  # type: ignore[arg-type]
        offers=lambda: list(catalog.shipped()),
    )


def minutes_to_ready(provider: SimProvider, clock: FakeClock, name: str) -> int:
    for minute in range(0, 120):
        if provider.get_pool(name).phase == "ready":
            return minute
        clock.advance(timedelta(minutes=1))
    raise AssertionError("never ready")


def test_lifecycle_and_idempotent_create() -> None:
    clock, provider = sim()
    created = provider.create_pool(spec(), "tok")
    assert created.phase == "creating" and created.nodes == 2
    assert provider.create_pool(spec(), "tok") == created  # same name: same pool
    assert 1 <= minutes_to_ready(provider, clock, "p") <= 40
    assert provider.resize_pool("p", 3).phase == "resizing"
    assert [p.name for p in provider.list_pools("me")] == ["p"]
    assert provider.list_pools("someone-else") == []
    with pytest.raises(InvalidRequest):
        provider.create_pool(spec(owner="someone-else"), "t2")
    provider.delete_pool("p")
    provider.delete_pool("p")
    with pytest.raises(PoolNotFound):
        provider.get_pool("p")


def test_latency_is_heavy_tailed_and_reproducible_from_the_seed() -> None:
    def readiness(seed: int) -> list[int]:
        clock, provider = sim(seed)
        out = []
        for i in range(30):
            provider.create_pool(spec(f"p{i}", nodes=1), "t")
        for i in range(30):
            out.append(minutes_to_ready(provider, clock, f"p{i}"))
        return out

    first = readiness(7)
    assert first == readiness(7)
    assert first != readiness(8)
    rng = random.Random(3)
    samples = sorted(LATENCY["aws"].sample(rng) for _ in range(2000))
    median, p99 = samples[1000], samples[1980]
    assert (
        300 < median < 420 and p99 > 2.5 * median
    )  # minutes typically, tens of minutes in the tail


def test_capacity_limits_refuse_with_capacity_unavailable() -> None:
    _, provider = sim(capacity={ON_DEMAND: 3})
    provider.create_pool(spec("a", nodes=2), "t")
    with pytest.raises(CapacityUnavailable):
        provider.create_pool(spec("b", nodes=2), "t")
    with pytest.raises(CapacityUnavailable):
        provider.resize_pool("a", 4)
    provider.create_pool(spec("c", nodes=1), "t")  # exactly at the limit


def test_injected_launch_failures() -> None:
    clock, provider = sim(failure_rate=1.0)
    provider.create_pool(spec(), "t")
    clock.advance(timedelta(hours=1))
    failed = provider.get_pool("p")
    assert failed.phase == "failed" and "simulated launch failure" in failed.message


def test_spot_interruptions_replace_nodes_reproducibly() -> None:
    def run(seed: int) -> int:
        clock, provider = sim(seed, cloud="gcp", spot_interruptions_per_hour=0.5)
        provider.create_pool(spec("s", offer=SPOT, nodes=4), "t")
        for _ in range(24 * 6):
            clock.advance(timedelta(minutes=10))
            provider.get_pool("s")
        return provider.world.interruptions

    assert run(5) == run(5) > 0
    _, on_demand = sim(5, spot_interruptions_per_hour=0.5)
    on_demand.create_pool(spec(), "t")
    on_demand.world.clock.advance(timedelta(days=1))  # type: ignore[attr-defined]
    on_demand.get_pool("p")
    assert on_demand.world.interruptions == 0  # only spot nodes are interrupted


def test_speed_divides_latency() -> None:
    clock, provider = sim(3, speed=60.0)
    provider.create_pool(spec(), "t")
    clock.advance(timedelta(seconds=45))  # 45 s at 60x is 45 min of simulated provisioning
    assert provider.get_pool("p").phase == "ready"

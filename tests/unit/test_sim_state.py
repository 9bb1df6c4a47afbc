"""The simulated cloud kept in a state file: its pools outlive the process that made them, as a
real cloud's do, and a harness sets its faults there. Two SimCloud objects on one file stand for
two processes (each takes the file's lock on its own descriptor)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from burst.clock import FakeClock
from burst.cloud import catalog
from burst.cloud.provider import CapacityUnavailable, PoolSpec, Taint, Throttled
from burst.model import OfferKey
from providers import sim_state
from providers.sim import SimCloud, SimProvider, SimSettings

OFFER = OfferKey("aws", "eu-central-1", "p3.2xlarge", "on-demand", "V100", 1)


def provider(clock: FakeClock, state: Path, **settings: float) -> SimProvider:
    world = SimCloud(clock, seed=1, settings=SimSettings(**settings), state=state)
    return SimProvider(
        world,
        target="aws-t",
        cloud="aws",
        region="eu-central-1",
        offers=lambda: list(catalog.shipped()),
    )


def spec(name: str, nodes: int = 2) -> PoolSpec:
    return PoolSpec(
        name=name,
        offer=OFFER,
        nodes=nodes,
        owner="me",
        policy="ml",
        epoch=3,
        labels={"team": "cms"},
        taints=(Taint("dedicated", "ml"),),
    )


def test_a_pool_made_by_one_process_is_found_resized_and_deleted_by_another(
    tmp_path: Path,
) -> None:
    clock, state = FakeClock(), tmp_path / "cloud.json"
    first = provider(clock, state, speed=60.0)
    made = first.create_pool(spec("p"), "tok")
    del first  # the process that made it is gone; the file is not
    second = provider(clock, state)
    assert second.create_pool(spec("p"), "tok") == made  # the same token: the same pool
    assert second.world.settings.speed == 60.0  # the world's settings come from its file
    assert [p.name for p in second.list_pools("me")] == ["p"]
    clock.advance(timedelta(hours=1))
    assert second.get_pool("p").phase == "ready"
    second.resize_pool("p", 1)
    clock.advance(timedelta(minutes=30))
    provider(clock, state).delete_pool("p", by="someone")
    pool = json.loads(state.read_text())["pools"][0]
    assert pool["deleted"] and pool["deleted_by"] == "someone" and pool["nodes"] == []
    # Every node's bill survives: launched at creation, ended when removed or deleted.
    lifetimes = sorted((n["launched"], n["ended"]) for n in pool["gone"])
    assert lifetimes == [
        ("2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00"),
        ("2026-01-01T00:00:00+00:00", "2026-01-01T01:30:00+00:00"),
    ]
    assert provider(clock, state).list_pools("me") == []


def test_the_faults_a_harness_writes_are_what_the_cloud_answers(tmp_path: Path) -> None:
    clock, state = FakeClock(), tmp_path / "cloud.json"
    cloud = provider(clock, state)
    cloud.create_pool(spec("p", nodes=1), "tok")
    written = json.loads(state.read_text())
    until = (clock.now() + timedelta(minutes=5)).isoformat()
    written["faults"] |= {"throttled_until": until, "retry_after_s": 7.0}
    state.write_text(json.dumps(written))
    with pytest.raises(Throttled) as throttled:
        cloud.get_pool("p")
    assert throttled.value.retry_after == 7.0
    written["faults"] |= {"throttled_until": None, "capacity_refused_until": until}
    state.write_text(json.dumps(written))
    assert cloud.get_pool("p").nodes == 1  # reads still answer
    with pytest.raises(CapacityUnavailable, match="simulated outage"):
        cloud.create_pool(spec("q"), "tok2")
    with pytest.raises(CapacityUnavailable):
        cloud.resize_pool("p", 3)
    cloud.resize_pool("p", 0)  # shrinking needs no capacity
    clock.advance(timedelta(minutes=6))
    cloud.create_pool(spec("q"), "tok2")  # the outage is over


def test_the_state_round_trips_exactly(tmp_path: Path) -> None:
    clock, state = FakeClock(), tmp_path / "cloud.json"
    cloud = provider(clock, state, spot_interruptions_per_hour=0.5, failure_rate=0.3)
    for i in range(5):
        cloud.create_pool(spec(f"p{i}"), f"t{i}")
    text = state.read_text()
    again = SimCloud(clock, state=state)
    with again.shared():
        assert json.dumps(sim_state.dump(again)) == text


def test_nodes_that_cannot_reach_their_cluster_join_later_and_the_cloud_still_answers(
    tmp_path: Path,
) -> None:
    """A node registration that met an unreachable cluster raised urllib3's MaxRetryError out
    of get_pool: the cloud call failed (and burst's pass with it) for as long as the cluster was
    cut off (seen in the soak)."""
    from kubernetes import client

    from tests.soak.world import free_port

    clock, state = FakeClock(), tmp_path / "cloud.json"
    closed = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{free_port()}"))
    world = SimCloud(clock, seed=1, settings=SimSettings(speed=60.0), state=state)
    cloud = SimProvider(
        world,
        target="aws-t",
        cloud="aws",
        region="eu-central-1",
        offers=lambda: [],
        kube=closed,
    )
    cloud.create_pool(spec("p", nodes=1), "tok")
    clock.advance(timedelta(hours=1))
    assert cloud.get_pool("p").phase == "ready"  # the cloud's word, without the cluster
    assert not json.loads(state.read_text())["pools"][0]["nodes"][0]["registered"]
    closed.close()


def test_what_ended_is_forgotten_an_hour_later_and_the_file_stays_the_size_of_what_lives(
    tmp_path: Path,
) -> None:
    clock, state = FakeClock(), tmp_path / "cloud.json"
    cloud = provider(clock, state, speed=60.0)
    cloud.create_pool(spec("kept", nodes=3), "k")
    for day in range(5):  # a pool a day, deleted; the kept pool shrinks by one each time
        cloud.create_pool(spec(f"p{day}"), f"t{day}")
        clock.advance(timedelta(minutes=30))
        cloud.delete_pool(f"p{day}")
        if day < 2:
            cloud.resize_pool("kept", 2 - day)
        assert cloud.ended_instances(f"p{day}")  # listed for a while, as EC2 lists them
        clock.advance(timedelta(hours=23, minutes=30))
    written = json.loads(state.read_text())
    # Only the deletion of the last hour is remembered, and of the kept pool only its live node.
    assert [p["spec"]["name"] for p in written["pools"]] == ["kept", "p4"]
    kept = written["pools"][0]
    assert (len(kept["nodes"]), kept["gone"]) == (1, [])
    assert cloud.ended_instances("p3") is None
    assert cloud.world.pools_created() == 6

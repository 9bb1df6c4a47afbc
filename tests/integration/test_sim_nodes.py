"""The simulated cloud registers its pools' nodes in a sandbox cluster through the Kubernetes API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kubernetes import client

from burst.clock import FakeClock
from burst.cloud import catalog
from burst.cloud.provider import PoolSpec
from burst.model import OfferKey
from providers.sim import SimCloud, SimProvider, SimSettings

OFFER = OfferKey("gcp", "europe-west4", "n1-standard-8", "spot", "T4", 1)


def test_nodes_appear_when_ready_and_go_with_the_pool(kube: Any) -> None:
    clock = FakeClock()
    world = SimCloud(clock, seed=2, settings=SimSettings(spot_interruptions_per_hour=0.0))
    sim = SimProvider(
        world,
        target="gcp-euw4",
        cloud="gcp",
        region="europe-west4",
        offers=lambda: list(catalog.shipped()),
        kube=kube,
    )
    core = client.CoreV1Api(kube)
    sim.create_pool(
        PoolSpec(name="burst-t4", offer=OFFER, nodes=2, owner="me", policy="ml", epoch=1), "t"
    )
    assert core.list_node(label_selector="burst.dev/pool=burst-t4").items == []
    clock.advance(timedelta(hours=1))
    assert sim.get_pool("burst-t4").phase == "ready"
    nodes = core.list_node(label_selector="burst.dev/pool=burst-t4").items
    assert sorted(n.metadata.name for n in nodes) == ["burst-t4-1", "burst-t4-2"]
    node = nodes[0]
    assert node.metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "n1-standard-8"
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    # burst's own taint, and GKE's GPU taint, which GKE adds to GPU nodes itself.
    assert [(t.key, t.effect) for t in node.spec.taints] == [
        ("burst.dev/pool", "NoSchedule"),
        ("nvidia.com/gpu", "NoSchedule"),
    ]
    sim.resize_pool("burst-t4", 1)
    assert [
        n.metadata.name for n in core.list_node(label_selector="burst.dev/pool=burst-t4").items
    ] == ["burst-t4-1"]
    sim.delete_pool("burst-t4")
    assert core.list_node(label_selector="burst.dev/pool=burst-t4").items == []

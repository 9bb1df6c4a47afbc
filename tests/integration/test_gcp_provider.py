"""The GCP provider with the real google-cloud-container REST client against a local GKE fake."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1

from burst.cloud import catalog
from burst.cloud.provider import (
    CapacityUnavailable,
    InvalidRequest,
    PoolNotFound,
    PoolSpec,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from burst.model import OfferKey
from providers.gcp import GcpProvider, cloud_name, to_node_pool
from tests.fakes.gke import Failure, GkeFake

OFFER = OfferKey("gcp", "europe-west4", "n1-standard-8", "spot", "T4", 1)
PARENT = "projects/ml-burst/locations/europe-west4/clusters/burst-euw4"


@pytest.fixture
def gke() -> Iterator[GkeFake]:
    fake = GkeFake(polls_to_done=2)
    yield fake
    fake.stop()


def provider(fake: GkeFake, waits: list[float] | None = None) -> GcpProvider:
    client = container_v1.ClusterManagerClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": fake.endpoint},
    )
    return GcpProvider(
        project="ml-burst",
        location="europe-west4",
        cluster="burst-euw4",
        region="europe-west4",
        offers=lambda: list(catalog.shipped()),
        client=client,
        sleep=(waits.append if waits is not None else lambda s: None),
    )


def spec(name: str = "gcp-euw4-n1-standard-8-spot-1xt4-1", nodes: int = 2) -> PoolSpec:
    return PoolSpec(name=name, offer=OFFER, nodes=nodes, owner="site-a", policy="ml", epoch=4)


def test_translation_is_pure_and_fits_gke_rules() -> None:
    pool = to_node_pool(spec(), "tok-1")
    assert pool["name"] == "gcp-euw4-n1-standard-8-spot-1xt4-1" and len(pool["name"]) <= 40
    assert pool["config"]["accelerators"][0]["accelerator_type"] == "nvidia-tesla-t4"
    assert pool["config"]["spot"] is True
    assert pool["config"]["resource_labels"]["burst-owner"] == "site-a"
    assert pool["config"]["labels"]["burst.dev/pool"] == spec().name
    long = cloud_name("gcp-europe-west4-a2-ultragpu-8g-spot-8xa100-80gb-12")
    assert len(long) <= 40 and long == cloud_name(
        "gcp-europe-west4-a2-ultragpu-8g-spot-8xa100-80gb-12"
    )


def test_pool_lifecycle(gke: GkeFake) -> None:
    gcp = provider(gke)
    created = gcp.create_pool(spec(), "tok-1")
    assert created.phase == "ready" and created.nodes == 2 and created.capacity == "spot"
    assert (
        gke.requests.count(
            ("GET", "/v1/projects/ml-burst/locations/europe-west4/operations/operation-1")
        )
        == 2  # polled until DONE: the fake's operations take two polls
    )
    assert gcp.resize_pool(created.name, 4).nodes == 4
    assert [p.name for p in gcp.list_pools("site-a")] == [created.name]
    assert gcp.list_pools("site-b") == []
    gcp.delete_pool(created.name)
    gcp.delete_pool(created.name)
    with pytest.raises(PoolNotFound):
        gcp.get_pool(created.name)


def test_create_retried_with_the_same_name_yields_one_pool(gke: GkeFake) -> None:
    gcp = provider(gke)
    gcp.create_pool(spec(), "tok-1")
    assert gcp.create_pool(spec(), "tok-1").name == spec().name  # 409 -> found, ours
    assert len(gke.pools) == 1


def test_a_create_lost_on_the_way_back_is_found(gke: GkeFake) -> None:
    # The fake creates the pool, then the answer is lost as a 503: the retry finds the pool.
    gcp = provider(gke)
    gke.fail(Failure("GET", "/operations/operation-1", status=503, message="backend unavailable"))
    assert gcp.create_pool(spec(), "tok").name == spec().name
    assert len(gke.pools) == 1


def test_pools_without_our_owner_label_are_left_alone(gke: GkeFake) -> None:
    gke.pools[f"{PARENT}/nodePools/theirs"] = {
        "name": "theirs",
        "config": {"resource_labels": {"team": "x"}},
        "status": 2,
        "initialNodeCount": 3,
    }
    gcp = provider(gke)
    gcp.create_pool(spec("mine"), "t")
    assert [p.name for p in gcp.list_pools("site-a")] == ["mine"]
    with pytest.raises(PoolNotFound):
        gcp.resize_pool("theirs", 0)
    gcp.delete_pool("theirs")
    assert f"{PARENT}/nodePools/theirs" in gke.pools
    with pytest.raises(InvalidRequest, match="not burst's"):
        gcp.create_pool(spec("theirs"), "t")


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (
            Failure(
                "POST",
                "/nodePools",
                operation_error=(8, "ZONE_RESOURCE_POOL_EXHAUSTED: no T4 in europe-west4-a"),
            ),
            CapacityUnavailable,
        ),
        (
            Failure(
                "POST",
                "/nodePools",
                status=403,
                message="Insufficient regional quota to satisfy request: NVIDIA_T4_GPUS",
            ),
            QuotaExceeded,
        ),
        (
            Failure(
                "POST",
                "/nodePools",
                status=429,
                message="Rate limit exceeded",
                headers={"Retry-After": "9"},
            ),
            Throttled,
        ),
        (Failure("POST", "/nodePools", status=500, message="internal error"), ProviderUnavailable),
        (Failure("POST", "/nodePools", status=400, message="Invalid machine type"), InvalidRequest),
    ],
    ids=["zone-exhausted", "quota", "throttled", "server-error", "invalid"],
)
def test_errors_map_to_typed_errors(
    gke: GkeFake, failure: Failure, expected: type[Exception]
) -> None:
    for _ in range(4 if failure.status in (429, 500) else 1):  # retried errors recur on each try
        gke.fail(Failure(**failure.__dict__))
    waits: list[float] = []
    with pytest.raises(expected):
        provider(gke, waits).create_pool(spec(), "t")
    if expected is Throttled:
        assert waits[:3] == [9.0, 9.0, 9.0]

"""The GCP provider with the real google-cloud-container REST client against a local GKE fake."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1

from burst.cloud import catalog
from burst.cloud.provider import (
    InvalidRequest,
    PoolNotFound,
    PoolSpec,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from burst.model import OfferKey
from providers.gcp import GcpProvider, cloud_name, map_error, to_node_pool, to_pool
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
    return PoolSpec(
        name=name,
        offer=OFFER,
        nodes=nodes,
        owner="site-a",
        policy="ml",
        epoch=4,
        zones=("europe-west4-b",),
    )


def settled(gcp: GcpProvider, name: str) -> Any:
    """The pool once GKE's operations on it are done (time passes with each request)."""
    for _ in range(10):
        pool = gcp.get_pool(name)
        if pool.phase not in ("creating", "resizing", "deleting"):
            return pool
    raise AssertionError(f"{name} did not settle")


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
    """Operations are started and followed in later calls, never waited for in one."""
    gcp = provider(gke)
    created = gcp.create_pool(spec(), "tok-1")
    assert created.phase == "creating" and created.nodes == 2 and created.capacity == "spot"
    assert not [r for r in gke.requests if "/operations/" in r[1]]  # no polling in the call
    assert settled(gcp, created.name).phase == "ready"
    assert gcp.resize_pool(created.name, 4).phase == "resizing"
    assert settled(gcp, created.name).nodes == 4
    assert [p.name for p in gcp.list_pools("site-a")] == [created.name]
    assert gcp.list_pools("site-b") == []
    gcp.delete_pool(created.name)
    assert gcp.get_pool(created.name).phase == "deleting"  # STOPPING: still billed
    gcp.delete_pool(created.name)
    with pytest.raises(PoolNotFound):
        settled(gcp, created.name)


def test_create_retried_with_the_same_name_yields_one_pool(gke: GkeFake) -> None:
    gcp = provider(gke)
    gcp.create_pool(spec(), "tok-1")
    assert gcp.create_pool(spec(), "tok-1").name == spec().name  # 409 -> found, ours
    assert len(gke.pools) == 1


def test_a_create_lost_on_the_way_back_is_found(gke: GkeFake) -> None:
    # The fake creates the pool, then the answer is lost as a 503: the retry finds the pool.
    gcp = provider(gke)
    gke.fail(Failure("POST", "/nodePools", status=0))  # passes, recorded
    gke.failures.clear()
    gke.fail(Failure("GET", "/nodePools/gcp-euw4-n1-standard-8-spot-1xt4-1", status=503))
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
    ids=["quota", "throttled", "server-error", "invalid"],
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


def test_a_pool_goes_to_one_zone_with_its_gpus_stated_and_no_second_gpu_taint() -> None:
    """locations was never sent: a regional cluster's pool spanned its three zones with the node
    count per zone (three times the nodes, and a GPU missing in one zone failed the create);
    accelerators and the driver were sent for n1 machines only; burst's nvidia.com/gpu taint is
    one GKE adds itself and refuses twice."""
    pool = to_node_pool(spec(), "t")
    assert pool["locations"] == ["europe-west4-b"] and pool["initial_node_count"] == 2
    a100 = PoolSpec(
        name="a2",
        offer=OfferKey("gcp", "europe-west4", "a2-highgpu-2g", "on-demand", "A100", 2),
        nodes=1,
        owner="o",
        policy="p",
        epoch=1,
        zones=("europe-west4-a",),
    )
    (accelerator,) = to_node_pool(a100, "t")["config"]["accelerators"]
    assert (
        accelerator["accelerator_count"] == 2
        and accelerator["accelerator_type"] == "nvidia-tesla-a100"
    )
    assert accelerator["gpu_driver_installation_config"]["gpu_driver_version"] == 2  # DEFAULT
    assert [t["key"] for t in pool["config"]["taints"]] == ["burst.dev/pool"]
    with pytest.raises(InvalidRequest, match="no zone"):
        to_node_pool(PoolSpec(name="z", offer=OFFER, nodes=1, owner="o", policy="p", epoch=1), "t")


def test_the_fake_counts_nodes_per_zone_and_refuses_what_gke_refuses(gke: GkeFake) -> None:
    """The GKE rules themselves: per-zone counts over the cluster's zones, accelerator counts of
    accelerator-optimized machines, a second nvidia.com/gpu taint, one operation at a time."""
    client = provider(gke)._client
    regional = container_v1.NodePool(
        name="spans", initial_node_count=2, config={"machine_type": "n1-standard-8"}
    )
    client.create_node_pool(request={"parent": PARENT, "node_pool": regional})
    data = container_v1.NodePool.to_dict(
        client.get_node_pool(name=f"{PARENT}/nodePools/spans"), use_integers_for_enums=True
    )
    assert len(data["locations"]) == 3 and to_pool(data).nodes == 6  # billed: 2 per zone
    for bad, words in (
        ({"machine_type": "a2-highgpu-2g"}, "does not match machine type"),
        (
            {
                "machine_type": "n1-standard-8",
                "accelerators": [{"accelerator_count": 1, "accelerator_type": "nvidia-tesla-t4"}],
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": 1}],
            },
            "Found more than one taint with key nvidia.com/gpu and effect NO_SCHEDULE",
        ),
    ):
        gke.pending.clear()
        with pytest.raises(Exception, match=words):
            client.create_node_pool(
                request={
                    "parent": PARENT,
                    "node_pool": {"name": "bad", "initial_node_count": 1, "config": bad},
                }
            )
    client.create_node_pool(
        request={
            "parent": PARENT,
            "node_pool": {
                "name": "first",
                "initial_node_count": 1,
                "locations": ["europe-west4-a"],
            },
        }
    )
    with pytest.raises(Exception, match="is currently creating a node pool"):
        client.create_node_pool(
            request={
                "parent": PARENT,
                "node_pool": {
                    "name": "second",
                    "initial_node_count": 1,
                    "locations": ["europe-west4-a"],
                },
            }
        )


def test_concurrent_operations_and_too_many_operations_are_waits_not_refusals(
    gke: GkeFake,
) -> None:
    """The "quota" word was tested before the status: GKE's 429 "Too many operations ...
    concurrent operations quota" and 400 "currently creating a node pool" became permanent."""
    busy = "Operation operation-7 is currently creating a node pool for cluster burst-euw4. Please wait and try again once it is done."
    too_many = 'Too many operations: cluster "burst-euw4" hits the concurrent operations quota 5, please try again later.'
    assert isinstance(map_error(400, busy), ProviderUnavailable)
    assert isinstance(map_error(429, too_many), Throttled)
    assert isinstance(
        map_error(403, "Insufficient regional quota to satisfy request"), QuotaExceeded
    )
    gcp = provider(gke)
    gcp.create_pool(spec("one"), "t")
    # A second create while the first runs: retried, and it goes once the first is done.
    assert gcp.create_pool(spec("two"), "t").name == "two"


def test_a_stockout_leaves_the_pool_failed_with_gce_stockout_not_ready(gke: GkeFake) -> None:
    """RUNNING_WITH_ERROR counted as ready; a stockout shows in the pool's conditions."""
    gcp = provider(gke)
    gke.fail(Failure("POST", "/nodePools", stockout=True))
    assert gcp.create_pool(spec(), "t").phase == "creating"
    pool = settled(gcp, spec().name)
    assert pool.phase == "failed" and pool.message.startswith("GCE_STOCKOUT")


def test_missing_credentials_are_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    gcp = GcpProvider(
        project="ml-burst",
        location="europe-west4",
        cluster="burst-euw4",
        region="europe-west4",
        offers=lambda: [],
        sleep=lambda s: None,
    )
    with pytest.raises(InvalidRequest, match="Google credentials"):
        gcp.list_pools("site-a")

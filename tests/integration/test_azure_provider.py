"""The Azure provider with the real azure-mgmt-containerservice client against a local ARM fake
over HTTPS (a throwaway CA from trustme), with the production HTTP pipeline unchanged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.mgmt.containerservice import ContainerServiceClient

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
from providers.azure import AzureProvider, cloud_name, map_error, to_agent_pool
from tests.fakes.arm import ArmFake, Failure

OFFER = OfferKey("azure", "eastus", "Standard_NC4as_T4_v3", "spot", "T4", 1)
POOLS = "/subscriptions/sub-1/resourceGroups/ml-burst/providers/Microsoft.ContainerService/managedClusters/burst-eastus/agentPools"


class StaticToken:
    """A TokenCredential (azure-core's protocol) that hands out a fixed test token."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("test-token", int(time.time()) + 3600)


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[ArmFake]:
    fake = ArmFake(tmp_path)
    yield fake
    fake.stop()


def provider(fake: ArmFake, waits: list[float] | None = None) -> AzureProvider:
    client = ContainerServiceClient(
        StaticToken(),
        "sub-1",
        base_url=fake.url,
        connection_verify=str(fake.ca_file),
        retry_total=0,
    )
    return AzureProvider(
        subscription_id="sub-1",
        resource_group="ml-burst",
        cluster="burst-eastus",
        region="eastus",
        offers=lambda: list(catalog.shipped()),
        client=client,
        sleep=(waits.append if waits is not None else lambda s: None),
    )


def spec(name: str = "azure-eastus-standard-nc6s-v3-spot-1", nodes: int = 2) -> PoolSpec:
    return PoolSpec(
        name=name,
        offer=OFFER,
        nodes=nodes,
        owner="site-a",
        policy="ml",
        epoch=2,
        spot_max_price_usd="0.95",
    )


def test_translation_is_pure_and_fits_aks_rules() -> None:
    body = to_agent_pool(spec(), "tok")["properties"]
    assert body["vmSize"] == "Standard_NC4as_T4_v3" and body["count"] == 2
    assert body["scaleSetPriority"] == "Spot" and body["scaleSetEvictionPolicy"] == "Delete"
    assert body["spotMaxPrice"] == 0.95
    # burst's own taint; AKS adds its spot taint to spot nodes itself.
    assert body["nodeTaints"] == [f"burst.dev/pool={spec().name}:NoSchedule"]
    assert body["tags"]["burst-owner"] == "site-a" and all("/" not in k for k in body["tags"])
    name = cloud_name(spec().name)
    assert len(name) <= 12 and name.isalnum() and name[0].isalpha()


def settled(azure: AzureProvider, name: str) -> Any:
    """The pool once its operation is done (time passes with each request to ARM)."""
    for _ in range(10):
        pool = azure.get_pool(name)
        if pool.phase not in ("creating", "resizing", "deleting"):
            return pool
    raise AssertionError(f"{name} did not settle")


def test_pool_lifecycle(arm: ArmFake) -> None:
    """Long-running operations are started, not waited for: the PUT returns Creating."""
    azure = provider(arm)
    created = azure.create_pool(spec(), "tok-1")
    assert (created.name, created.phase, created.nodes, created.capacity) == (
        spec().name,
        "creating",
        2,
        "spot",
    )
    assert not [t for t in arm.tokens if t != "test-token"]
    assert settled(azure, created.name).phase == "ready"
    assert azure.resize_pool(created.name, 5).phase == "resizing"
    assert settled(azure, created.name).nodes == 5
    assert (
        arm.pools[f"{POOLS}/{cloud_name(spec().name)}"]["properties"]["scaleSetPriority"] == "Spot"
    )
    assert [p.name for p in azure.list_pools("site-a")] == [created.name]
    assert azure.list_pools("site-b") == []
    azure.delete_pool(created.name)
    azure.delete_pool(created.name)
    with pytest.raises(PoolNotFound):
        settled(azure, created.name)


def test_create_again_yields_one_pool_and_never_changes_it(arm: ArmFake) -> None:
    azure = provider(arm)
    azure.create_pool(spec(nodes=2), "tok-1")
    again = azure.create_pool(spec(nodes=7), "tok-1")
    assert again.nodes == 2 and len(arm.pools) == 1


def test_a_second_put_while_the_first_runs_is_a_wait_not_a_quota(arm: ArmFake) -> None:
    """A polling error re-sent the whole PUT, which AKS answers 409 OperationNotAllowed while
    its operation runs; that was taken for a permanent quota error while Azure went on creating
    the pool. Nothing is polled now, and the 409 is a wait."""
    arm.polls_to_done = 10
    azure = provider(arm)
    azure.create_pool(spec(), "tok")
    path = f"{POOLS}/{cloud_name(spec().name)}?api-version=2025-01-01"
    client = azure._client
    with pytest.raises(Exception, match="Another agentpool operation") as busy:
        client.agent_pools.begin_create_or_update(
            "ml-burst",
            "burst-eastus",
            cloud_name(spec().name),
            to_agent_pool(spec(), "tok"),
            polling=False,
        )
    assert path and busy.value.status_code == 409  # type: ignore[attr-defined]
    assert isinstance(
        map_error(
            409,
            "OperationNotAllowed",
            "Operation is not allowed: Another agentpool operation (b1 - Creating) is in progress, please wait",
        ),
        ProviderUnavailable,
    )
    assert isinstance(
        map_error(
            409,
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved Total Regional Cores quota",
        ),
        QuotaExceeded,
    )
    assert azure.create_pool(spec(), "tok").name == spec().name  # found, not put again
    assert len(arm.pools) == 1


def test_pools_without_our_owner_tag_are_left_alone(arm: ArmFake) -> None:
    arm.pools[f"{POOLS}/{cloud_name('theirs')}"] = {
        "id": "x",
        "name": cloud_name("theirs"),
        "properties": {
            "count": 3,
            "vmSize": "Standard_D4s_v5",
            "provisioningState": "Succeeded",
            "tags": {},
        },
    }
    azure = provider(arm)
    azure.create_pool(spec("mine"), "t")
    assert [p.name for p in azure.list_pools("site-a")] == ["mine"]
    with pytest.raises(PoolNotFound):
        azure.resize_pool("theirs", 0)
    azure.delete_pool("theirs")
    assert f"{POOLS}/{cloud_name('theirs')}" in arm.pools
    with pytest.raises(InvalidRequest, match="not burst's"):
        azure.create_pool(spec("theirs"), "t")


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (
            Failure(
                "PUT",
                "",
                status=409,
                code="ResourceOperationFailure",
                message="The resource operation completed with terminal provisioning state 'Failed'.",
                details=[{"code": "ZonalAllocationFailed", "message": "Allocation failed."}],
            ),
            CapacityUnavailable,
        ),
        (
            Failure(
                "PUT", "", status=409, code="SkuNotAvailable", message="SKU not available in eastus"
            ),
            CapacityUnavailable,
        ),
        (
            Failure(
                "PUT",
                "",
                status=400,
                code="QuotaExceeded",
                message="Operation could not be completed as it results in exceeding approved standardNCSv3Family quota",
            ),
            QuotaExceeded,
        ),
        (
            Failure(
                "PUT",
                "",
                status=429,
                code="TooManyRequests",
                message="slow down",
                headers={"Retry-After": "11"},
            ),
            Throttled,
        ),
        (
            Failure("PUT", "", status=500, code="InternalServerError", message="oops"),
            ProviderUnavailable,
        ),
        (
            Failure("PUT", "", status=400, code="InvalidParameter", message="bad vm size"),
            InvalidRequest,
        ),
    ],
    ids=["nested-allocation", "sku-not-available", "quota", "throttled", "server-error", "invalid"],
)
def test_errors_map_to_typed_errors(
    arm: ArmFake, failure: Failure, expected: type[Exception]
) -> None:
    # The suffix "" matches the agent pool PUT; retryable errors recur on every try.
    for _ in range(4 if failure.status in (429, 500) else 1):
        arm.fail(Failure(**failure.__dict__))
    waits: list[float] = []
    with pytest.raises(expected):
        provider(arm, waits).create_pool(spec(), "t")
    if expected is Throttled:
        assert waits == [11.0, 11.0, 11.0]

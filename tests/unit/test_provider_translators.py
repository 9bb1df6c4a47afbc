"""The providers' pure translators and the shared throttle, without any SDK or server."""

from __future__ import annotations

import pytest

from burst.cloud.provider import (
    CapacityUnavailable,
    InvalidRequest,
    PoolNotFound,
    PoolSpec,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
    TokenBucket,
    with_retries,
)
from burst.model import OfferKey
from providers import aws, azure, gcp

SPEC = PoolSpec(
    name="aws-euc1-g5-xlarge-spot-1",
    offer=OfferKey("aws", "eu-central-1", "g5.xlarge", "spot", "A10G", 1),
    nodes=3,
    owner="site-a",
    policy="ml",
    epoch=9,
)


def test_aws_request_and_answer() -> None:
    request = aws.to_request(SPEC, "tok", "c", "arn:role", ["s1"], "AL2023_x86_64_NVIDIA")
    assert request["capacityType"] == "SPOT" and request["instanceTypes"] == ["g5.xlarge"]
    assert request["scalingConfig"] == {"minSize": 0, "maxSize": 3, "desiredSize": 3}
    assert request["clientRequestToken"] == "tok" and request["tags"]["burst.dev/epoch"] == "9"
    pool = aws.to_pool(
        {
            "nodegroupName": "x",
            "status": "CREATE_FAILED",
            "capacityType": "SPOT",
            "instanceTypes": ["g5.xlarge"],
            "scalingConfig": {"desiredSize": 3},
            "tags": {"burst.dev/pool": SPEC.name, "burst.dev/owner": "site-a"},
            "health": {"issues": [{"code": "AsgInstanceLaunchFailures", "message": "no capacity"}]},
        }
    )
    assert (pool.name, pool.phase, pool.capacity, pool.owner) == (
        SPEC.name,
        "failed",
        "spot",
        "site-a",
    )
    assert pool.message == "AsgInstanceLaunchFailures: no capacity"


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ResourceNotFoundException", 404, PoolNotFound),
        ("ThrottlingException", 400, Throttled),
        ("ResourceLimitExceededException", 400, QuotaExceeded),
        ("ServerException", 500, ProviderUnavailable),
        ("InvalidParameterException", 400, InvalidRequest),
        ("AsgInstanceLaunchFailures", 400, CapacityUnavailable),
    ],
)
def test_aws_error_codes(code: str, status: int, expected: type[Exception]) -> None:
    assert isinstance(aws.map_error(code, "m", status), expected)


def test_gcp_answer_and_errors() -> None:
    pool = gcp.to_pool(
        {
            "name": "n",
            "status": "ERROR",
            "initial_node_count": 2,
            "config": {
                "machine_type": "n1-standard-8",
                "spot": True,
                "resource_labels": {"burst-owner": "site-a", "burst-pool": "logical"},
            },
            "status_message": "ZONE_RESOURCE_POOL_EXHAUSTED",
        }
    )
    assert (pool.name, pool.phase, pool.owner, pool.capacity) == (
        "logical",
        "failed",
        "site-a",
        "spot",
    )
    assert isinstance(
        gcp.map_error(429, "ZONE_RESOURCE_POOL_EXHAUSTED in europe-west4-a"), CapacityUnavailable
    )
    assert isinstance(gcp.map_error(403, "Quota 'NVIDIA_T4_GPUS' exceeded"), QuotaExceeded)
    assert isinstance(gcp.map_error(404, "gone"), PoolNotFound)
    assert gcp.gce_labels({"burst.dev/owner": "Site.A"}) == {"burst-owner": "site-a"}


def test_azure_answer_and_errors() -> None:
    pool = azure.to_pool(
        {
            "name": "b123",
            "id": "/x",
            "properties": {
                "count": 4,
                "vmSize": "Standard_NC4as_T4_v3",
                "provisioningState": "Updating",
                "scaleSetPriority": "Spot",
                "tags": {"burst-pool": "logical", "burst-owner": "site-a"},
            },
        }
    )
    assert (pool.name, pool.phase, pool.nodes, pool.capacity, pool.owner) == (
        "logical",
        "resizing",
        4,
        "spot",
        "site-a",
    )
    assert isinstance(azure.map_error(409, "SkuNotAvailable", "no"), CapacityUnavailable)
    assert isinstance(azure.map_error(429, "", "slow", 5), Throttled)


def test_token_bucket_spaces_calls_beyond_the_burst() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 3))
        now[0] += seconds

    bucket = TokenBucket(rate=2, burst=3, sleep=sleep, monotonic=lambda: now[0])
    for _ in range(5):
        bucket.take()
    assert slept == [0.5, 0.5]  # three at once, then one every half second


def test_retries_stop_at_permanent_errors() -> None:
    calls = []

    def fail() -> None:
        calls.append(1)
        raise InvalidRequest("no")

    with pytest.raises(InvalidRequest):
        with_retries(fail, sleep=lambda s: None)
    assert len(calls) == 1

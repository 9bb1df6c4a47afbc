"""The AWS provider with the real boto3 EKS client against a moto server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import urllib3

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
from burst.model import TAG_OWNER, OfferKey
from providers.aws import AwsProvider
from tests.fakes.eks import EksLayer
from tests.fakes.proxy import Proxy, Rule

REGION = "eu-central-1"
CLUSTER = "burst-euc1"
OFFER = OfferKey("aws", REGION, "p3.2xlarge", "on-demand", "V100", 1)


@pytest.fixture
def eks(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Credentials through the standard chain (environment variables), as in production.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    urllib3.PoolManager().request("POST", f"{moto_url}/moto-api/reset")
    client = boto3.client("eks", region_name=REGION, endpoint_url=moto_url)
    client.create_cluster(
        name=CLUSTER,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]},
    )
    return client


def provider(url: str, **kwargs: Any) -> AwsProvider:
    return AwsProvider(
        region=REGION,
        cluster=CLUSTER,
        offers=lambda: list(catalog.shipped()),
        node_role_arn="arn:aws:iam::123456789012:role/nodes",
        subnets=["subnet-1", "subnet-2"],
        endpoint_url=url,
        **kwargs,
    )


def spec(name: str = "aws-euc1-p3-2xlarge-od-1", nodes: int = 2) -> PoolSpec:
    return PoolSpec(
        name=name,
        offer=OFFER,
        nodes=nodes,
        owner="site-a",
        policy="ml",
        epoch=3,
        labels={"nvidia.com/gpu.product": "Tesla-V100"},
    )


@pytest.fixture
def layer(eks: Any, moto_url: str) -> Iterator[EksLayer]:
    fake = EksLayer(moto_url)
    yield fake
    fake.stop()


def test_pool_lifecycle(eks: Any, layer: EksLayer) -> None:
    aws = provider(layer.url)
    created = aws.create_pool(spec(), token="tok-1")
    assert (created.name, created.nodes, created.instance_type, created.capacity) == (
        "aws-euc1-p3-2xlarge-od-1",
        2,
        "p3.2xlarge",
        "on-demand",
    )
    assert created.phase in ("creating", "ready")
    described = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=created.name)["nodegroup"]
    assert described["tags"][TAG_OWNER] == "site-a" and described["tags"]["burst.dev/epoch"] == "3"
    assert described["labels"]["burst.dev/pool"] == created.name
    # The pool's own taint, which only its copies tolerate (EKS adds no GPU taint of its own).
    assert described["taints"] == [
        {"key": "burst.dev/pool", "value": created.name, "effect": "NO_SCHEDULE"}
    ]
    assert described["amiType"] == "AL2023_x86_64_NVIDIA"
    assert described["nodeRole"] == "arn:aws:iam::123456789012:role/nodes"
    assert aws.get_pool(created.name).phase == "creating"
    assert aws.get_pool(created.name).phase == "ready"
    resized = aws.resize_pool(created.name, 5)
    assert (resized.nodes, resized.phase) == (5, "resizing")  # EKS: UPDATING until the update ends
    assert aws.get_pool(created.name).phase == "resizing"
    assert aws.get_pool(created.name).phase == "ready"
    assert [p.name for p in aws.list_pools("site-a")] == [created.name]
    aws.delete_pool(created.name)
    aws.delete_pool(created.name)  # again: no error
    with pytest.raises(PoolNotFound):
        aws.get_pool(created.name)


def test_create_retried_with_the_same_token_yields_one_pool(eks: Any, moto_url: str) -> None:
    aws = provider(moto_url)
    first = aws.create_pool(spec(), token="tok-1")
    again = aws.create_pool(spec(), token="tok-1")
    assert first.name == again.name
    assert eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] == [first.name]


def test_a_create_that_timed_out_but_succeeded_is_found_not_duplicated(
    eks: Any, moto_url: str
) -> None:
    proxy = Proxy(moto_url)
    try:
        proxy.add(Rule(lambda m, p, b: m == "POST" and p.endswith("/node-groups"), delay=2.0))
        aws = provider(proxy.url, read_timeout=1.0, sleep=lambda s: None)
        pool = aws.create_pool(spec(), token="tok-1")  # times out, is retried, finds the pool
        assert pool.name == "aws-euc1-p3-2xlarge-od-1"
        assert eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] == [pool.name]
    finally:
        proxy.stop()


def test_pools_without_our_owner_tag_are_never_listed_or_touched(eks: Any, moto_url: str) -> None:
    eks.create_nodegroup(
        clusterName=CLUSTER,
        nodegroupName="theirs",
        nodeRole="arn:aws:iam::123456789012:role/x",
        subnets=["subnet-1"],
        tags={"team": "other"},
    )
    eks.create_nodegroup(
        clusterName=CLUSTER,
        nodegroupName="other-site",
        nodeRole="arn:aws:iam::123456789012:role/x",
        subnets=["subnet-1"],
        tags={TAG_OWNER: "site-b"},
    )
    aws = provider(moto_url)
    aws.create_pool(spec("mine"), token="t")
    assert [p.name for p in aws.list_pools("site-a")] == ["mine"]
    with pytest.raises(PoolNotFound):
        aws.get_pool("theirs")
    aws.delete_pool("theirs")  # not ours: treated as absent, left alone
    with pytest.raises(PoolNotFound):
        aws.resize_pool("theirs", 3)
    names = eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"]
    assert sorted(names) == ["mine", "other-site", "theirs"]
    with pytest.raises(InvalidRequest, match="exists and is not burst's"):
        aws.create_pool(spec("theirs"), token="t2")


def _error(code: str, message: str) -> bytes:
    return json.dumps({"__type": code, "message": message}).encode()


@pytest.mark.parametrize(
    ("status", "code", "headers", "expected"),
    [
        (400, "ResourceLimitExceededException", {}, QuotaExceeded),
        (429, "ThrottlingException", {"Retry-After": "7"}, Throttled),
        (400, "InvalidRequestException", {}, InvalidRequest),
        (500, "ServerException", {}, ProviderUnavailable),
        (400, "InvalidParameterException", {}, InvalidRequest),
    ],
    ids=["quota", "throttled", "invalid", "server-error", "bad-parameter"],
)
def test_errors_map_to_typed_errors(
    eks: Any,
    moto_url: str,
    status: int,
    code: str,
    headers: dict[str, str],
    expected: type[Exception],
) -> None:
    proxy = Proxy(moto_url)
    try:
        proxy.add(
            Rule(
                lambda m, p, b: m == "POST" and p.endswith("/node-groups"),
                status=status,
                body=_error(code, "scripted"),
                times=10,
                headers={"Content-Type": "application/json", "x-amzn-ErrorType": code, **headers},
            )
        )
        waits: list[float] = []
        aws = provider(proxy.url, sleep=waits.append)
        with pytest.raises(expected) as caught:
            aws.create_pool(spec(), token="t")
        if isinstance(caught.value, Throttled):
            assert caught.value.retry_after == 7.0
            assert waits == [7.0, 7.0, 7.0]  # Retry-After wins over the shorter back-off
        elif caught.value.retryable:
            assert waits == [0.5, 1.0, 2.0]  # exponential back-off, then give up
        else:
            assert waits == []  # permanent: not retried
    finally:
        proxy.stop()


def test_capacity_error_in_the_message_is_capacity() -> None:
    from providers.aws import map_error

    assert isinstance(
        map_error(
            "InvalidRequestException", "InsufficientInstanceCapacity: no p3.2xlarge in euc1-az1"
        ),
        CapacityUnavailable,
    )


def test_capacity_shows_as_health_issues_while_creating(eks: Any, layer: EksLayer) -> None:
    """EC2 capacity never comes back from CreateNodegroup: the node group stays CREATING with an
    AsgInstanceLaunchFailures health issue, then CREATE_FAILED. The issue is the failure."""
    aws = provider(layer.url)
    created = aws.create_pool(spec(), token="t")
    layer.script(created.name).launch_failure = (
        "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not "
        "have sufficient p3.2xlarge capacity in the Availability Zone you requested."
    )
    seen = aws.get_pool(created.name)
    assert seen.phase == "failed" and "InsufficientInstanceCapacity" in seen.message
    assert "AsgInstanceLaunchFailures" in seen.message


def test_degraded_with_nodes_is_not_failed(eks: Any, layer: EksLayer) -> None:
    aws = provider(layer.url)
    created = aws.create_pool(spec(), token="t")
    layer.script(created.name).creating = 0
    layer.script(created.name).degraded = True
    seen = aws.get_pool(created.name)
    assert (seen.phase, seen.nodes) == ("ready", 2)
    assert "Ec2SecurityGroupNotFound" in seen.message


def test_a_second_resize_during_an_update_is_a_wait(eks: Any, layer: EksLayer) -> None:
    layer.updating = 10
    aws = provider(layer.url, sleep=lambda _: None)
    created = aws.create_pool(spec(), token="t")
    layer.script(created.name).creating = 0
    aws.resize_pool(created.name, 3)
    with pytest.raises(ProviderUnavailable, match="ResourceInUseException"):
        aws.resize_pool(created.name, 4)


def test_graviton_gpus_get_the_arm_ami(eks: Any, layer: EksLayer) -> None:
    aws = provider(layer.url)
    arm = spec("aws-euc1-g5g-xlarge-od-1")
    arm = PoolSpec(
        name=arm.name,
        offer=OfferKey("aws", REGION, "g5g.xlarge", "on-demand", "T4G", 1),
        nodes=1,
        owner="site-a",
        policy="ml",
        epoch=3,
    )
    aws.create_pool(arm, token="t")
    described = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=arm.name)["nodegroup"]
    assert described["amiType"] == "AL2023_ARM_64_NVIDIA"


def test_a_request_botocore_refuses_is_permanent_not_retried(eks: Any, moto_url: str) -> None:
    """botocore validates against the service model before sending (a negative desiredSize, a
    missing nodeRole): that was a BotoCoreError, taken for an outage and retried for ever."""
    waits: list[float] = []
    aws = provider(moto_url, sleep=waits.append)
    created = aws.create_pool(spec(), token="t")
    with pytest.raises(InvalidRequest, match="desiredSize"):
        aws.resize_pool(created.name, -1)
    assert waits == []

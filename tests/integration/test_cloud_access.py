"""burst opens each cloud cluster with tokens from the cloud SDK it already has (no exec plugin,
no cloud CLI in the image): EKS through moto, GKE and AKS through their local fakes, and the
tokens reach a cluster whose authenticator checks them as the cloud's does."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
import urllib3
from azure.core.credentials import AccessToken
from azure.mgmt.containerservice import ContainerServiceClient
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from burst.cloud import catalog
from burst.cloud.provider import InvalidRequest
from burst.kube.connect import cloud_client
from burst.model import ClusterAccess
from burst.sandbox import Sandbox
from providers.aws import AwsProvider
from providers.azure import AKS_SERVER_SCOPE, AzureProvider
from providers.gcp import GcpProvider
from tests.fakes.arm import ArmFake
from tests.fakes.gke import GkeFake


def eks_authenticator(cluster: str) -> Any:
    """What aws-iam-authenticator checks before it asks STS who signed: the k8s-aws-v1 prefix, a
    presigned GetCallerIdentity URL of STS, signed over the x-k8s-aws-id header that names this
    cluster, expiring within 15 minutes (aws-iam-authenticator pkg/token/token.go Verify)."""

    def check(token: str) -> bool:
        if not token.startswith("k8s-aws-v1."):
            return False
        body = token.removeprefix("k8s-aws-v1.")
        url = urlsplit(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode())
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        return (
            url.hostname is not None
            and url.hostname.startswith("sts.")
            and query.get("Action") == "GetCallerIdentity"
            and "x-k8s-aws-id" in query.get("X-Amz-SignedHeaders", "").split(";")
            and int(query.get("X-Amz-Expires", "0")) <= 900
            and cluster == cluster  # the header's value is signed, not in the URL: STS checks it
        )

    return check


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> AwsProvider:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    urllib3.PoolManager().request("POST", f"{moto_url}/moto-api/reset")
    boto3.client("eks", region_name="eu-central-1", endpoint_url=moto_url).create_cluster(
        name="burst-euc1",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    return AwsProvider(
        region="eu-central-1",
        cluster="burst-euc1",
        offers=lambda: list(catalog.shipped()),
        node_role_arn="arn:aws:iam::123456789012:role/nodes",
        subnets=["subnet-1"],
        endpoint_url=moto_url,
    )


def test_eks_endpoint_ca_and_a_token_its_authenticator_accepts(aws: AwsProvider) -> None:
    access = aws.cluster_access()
    assert access.host.startswith("https://") and "eks.amazonaws.com" in access.host
    assert access.ca_pem
    _, expires = access.token()
    assert expires - datetime.now(UTC) <= timedelta(minutes=15)
    with Sandbox(authenticate=eks_authenticator("burst-euc1"), controllers=False) as cluster:
        opened = cloud_client(
            ClusterAccess(cluster.url, None, access.token), lambda: datetime.now(UTC)
        )
        assert client.CoreV1Api(opened).list_namespace().items  # authenticated
        bad = cloud_client(
            ClusterAccess(
                cluster.url,
                None,
                lambda: ("k8s-aws-v1.bm9wZQ", datetime.now(UTC) + timedelta(hours=1)),
            ),
            lambda: datetime.now(UTC),
        )
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(bad).list_namespace()
        assert refused.value.status == 401


def test_a_token_is_fetched_again_only_when_it_is_about_to_expire() -> None:
    issued: list[str] = []
    now = [datetime(2026, 11, 30, 12, 0, tzinfo=UTC)]

    def token() -> tuple[str, datetime]:
        issued.append(f"t{len(issued)}")
        return issued[-1], now[0] + timedelta(minutes=14)

    valid = {"t0", "t1"}
    with Sandbox(authenticate=lambda t: t in valid, controllers=False) as cluster:
        core = client.CoreV1Api(
            cloud_client(ClusterAccess(cluster.url, None, token), lambda: now[0])
        )
        core.list_namespace()
        core.list_namespace()
        assert issued == ["t0"]
        now[0] += timedelta(minutes=15)
        core.list_namespace()
        assert issued == ["t0", "t1"]


class RefreshingCredentials(AnonymousCredentials):
    """Google credentials whose refresh() hands out a short-lived access token (as a service
    account's would, from the token endpoint)."""

    def refresh(self, request: Any) -> None:
        self.token = "ya29.test-token"
        self.expiry = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)


@pytest.fixture
def gke() -> Iterator[GkeFake]:
    fake = GkeFake()
    yield fake
    fake.stop()


def gcp(fake: GkeFake) -> GcpProvider:
    return GcpProvider(
        project="ml-burst",
        location="europe-west4",
        cluster="burst-euw4",
        region="europe-west4",
        offers=lambda: list(catalog.shipped()),
        client=container_v1.ClusterManagerClient(
            transport="rest",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": fake.endpoint},
        ),
    )


def test_gke_endpoint_ca_and_an_access_token(gke: GkeFake) -> None:
    provider = gcp(gke)
    provider._token_credentials = RefreshingCredentials()
    access = provider.cluster_access()
    assert access.host == "https://203.0.113.10" and access.ca_pem == base64.b64decode(
        gke.ca_base64
    )
    token, expires = access.token()
    assert token == "ya29.test-token" and expires > datetime.now(UTC)


def test_missing_google_credentials_are_a_typed_error(
    gke: GkeFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Missing Google credentials escaped as google.auth's own exceptions."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    with pytest.raises(InvalidRequest) as missing:
        gcp(gke).cluster_token()
    assert "Google credentials" in missing.value.message


class StaticToken:
    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken("entra-token", int(time.time()) + 3600)


def test_aks_endpoint_ca_and_an_entra_token_for_the_aks_server(tmp_path: Path) -> None:
    fake = ArmFake(tmp_path)
    try:
        credential = StaticToken()
        provider = AzureProvider(
            subscription_id="sub-1",
            resource_group="ml-burst",
            cluster="burst-eastus",
            region="eastus",
            offers=lambda: list(catalog.shipped()),
            client=ContainerServiceClient(
                credential,
                "sub-1",
                base_url=fake.url,
                connection_verify=str(fake.ca_file),
                retry_total=0,
            ),
            credential=credential,
        )
        access = provider.cluster_access()
        assert access.host == "https://burst-eastus-dns.hcp.eastus.azmk8s.io:443"
        assert access.ca_pem and b"BEGIN CERTIFICATE" in access.ca_pem
        token, expires = access.token()
        assert token == "entra-token" and credential.scopes[-1] == (AKS_SERVER_SCOPE,)
        assert expires > datetime.now(UTC)
    finally:
        fake.stop()

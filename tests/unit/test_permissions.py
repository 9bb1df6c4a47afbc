"""docs/cloud-permissions.md against the code: every SDK operation a provider calls is covered by
the permissions the document tells admins to grant. The operations are read from the providers'
source, so a new call without a documented permission fails here, not in an admin's cluster."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import ROOT

DOC = (ROOT / "docs" / "cloud-permissions.md").read_text()

# What each SDK operation needs, from each cloud's reference: the EKS API Reference and the
# Service Authorization Reference (an EKS action is named as its operation), GKE's "IAM
# permissions" table, and Azure's resource provider operations for Microsoft.ContainerService.
NEEDS: dict[str, dict[str, str | None]] = {
    "aws": {
        "create_nodegroup": "eks:CreateNodegroup",
        "describe_nodegroup": "eks:DescribeNodegroup",
        "update_nodegroup_config": "eks:UpdateNodegroupConfig",
        "delete_nodegroup": "eks:DeleteNodegroup",
        "list_nodegroups": "eks:ListNodegroups",
        "describe_cluster": "eks:DescribeCluster",
        "get_products": "pricing:GetProducts",
        "describe_spot_price_history": "ec2:DescribeSpotPriceHistory",
        "get_caller_identity": None,
        "get_service_quota": "servicequotas:GetServiceQuota",  # "No permissions are required" (STS API Reference)
    },
    "gcp": {
        "get_cluster": "container.clusters.get",
        "create_node_pool": "container.nodePools.create",
        "get_node_pool": "container.nodePools.get",
        "list_node_pools": "container.nodePools.list",
        "set_node_pool_size": "container.nodePools.update",
        "delete_node_pool": "container.nodePools.delete",
        "get_operation": "container.operations.get",
    },
    "azure": {
        "managed_clusters.get": "Microsoft.ContainerService/managedClusters/read",
        "get": "Microsoft.ContainerService/managedClusters/agentPools/read",
        "list": "Microsoft.ContainerService/managedClusters/agentPools/read",
        "begin_create_or_update": "Microsoft.ContainerService/managedClusters/agentPools/write",
        "begin_delete": "Microsoft.ContainerService/managedClusters/agentPools/delete",
        "list_cluster_user_credentials": (
            "Microsoft.ContainerService/managedClusters/listClusterUserCredential/action"
        ),
    },
}

# SDK calls made other than through the provider's `_call`: price clients, presigned tokens, the
# AKS cluster's credentials.
_DIRECT = (
    re.compile(
        r"\b(?:pricing|ec2|sts|_quotas|managed_clusters)\.(?!get_paginator|generate_presigned)(\w+)\("
    ),
    re.compile(r"get_paginator\(\s*\"(\w+)\""),
    re.compile(r"generate_presigned_url\(\s*\"(\w+)\""),
)
_CALL = re.compile(r"_call\(\s*\"([\w.]+)\"")


def operations(cloud: str) -> set[str]:
    source = (ROOT / "providers" / f"{cloud}.py").read_text()
    found = set(_CALL.findall(source))
    for pattern in _DIRECT:
        found |= set(pattern.findall(source))
    return found


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.S)


def granted(cloud: str) -> set[str]:
    if cloud == "aws":
        statements = json.loads(_blocks("json")[0])["Statement"]
        return {
            a
            for s in statements
            for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        }
    if cloud == "gcp":
        return set(yaml.safe_load(_blocks("yaml")[0])["includedPermissions"])
    return set(json.loads(_blocks("json")[1])["Actions"])


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_every_operation_the_code_calls_is_granted(cloud: str) -> None:
    called = operations(cloud)
    assert called, "no operations found: the scan no longer matches the provider"
    unknown = called - NEEDS[cloud].keys()
    assert not unknown, f"{cloud} calls {sorted(unknown)}: add what they need to NEEDS and the doc"
    missing = {NEEDS[cloud][op] for op in called} - granted(cloud) - {None}
    assert not missing, f"docs/cloud-permissions.md does not grant {sorted(missing)}"


def test_listing_can_describe_node_groups_it_does_not_own_yet() -> None:
    """list_pools describes every node group to read its tags; a DescribeNodegroup conditioned on
    burst's owner tag is denied for the others, and the whole listing failed."""
    statements = json.loads(_blocks("json")[0])["Statement"]
    describing = [s for s in statements if "eks:DescribeNodegroup" in s["Action"]]
    assert describing and all("Condition" not in s for s in describing)

"""AWS: GPU node pools as EKS managed node groups, through boto3.

Pure translators (`to_request`, `to_pool`, `map_error`) turn burst's PoolSpec into an EKS
CreateNodegroup request and EKS answers into Pools and typed errors; `AwsProvider` is the thin
client around them. Credentials come from boto3's standard chain, optionally a named profile;
they are never logged or stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from burst.clock import SystemClock
from burst.cloud.provider import (
    CapacityUnavailable,
    Instance,
    InvalidRequest,
    Pool,
    PoolNotFound,
    PoolPhase,
    PoolSpec,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
    TokenBucket,
    with_retries,
)
from burst.model import TAG_OWNER, TAG_POOL, ClusterAccess, Offer
from providers.aws_prices import AwsPrices, error_code

_EFFECTS = {
    "NoSchedule": "NO_SCHEDULE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
}
_PHASES: Mapping[str, PoolPhase] = {
    "CREATING": "creating",
    "ACTIVE": "ready",
    "UPDATING": "resizing",
    "DELETING": "deleting",
    "CREATE_FAILED": "failed",
    "DELETE_FAILED": "failed",
    # DEGRADED is a health issue beside running nodes (a lost security group, an ASG setting): the
    # nodes still serve, and burst counts them by what has joined the cluster.
    "DEGRADED": "ready",
}
# EC2 capacity and account limits reach a managed node group as health issues, never as API errors
# (NodegroupIssueCode in botocore's EKS model; AsgInstanceLaunchFailures carries EC2's
# InsufficientInstanceCapacity message). While these show, the pool's launch or resize has failed.
_LAUNCH_ISSUES = {"AsgInstanceLaunchFailures", "InstanceLimitExceeded", "InsufficientFreeAddresses"}
# EKS's accelerated AMIs per architecture ("Use EKS-optimized accelerated AMIs for GPU instances",
# EKS User Guide): g5g (Graviton with NVIDIA T4G) needs the ARM one.
_ARM_FAMILIES = ("g5g.",)
# EC2 limits GPU instances by vCPUs per family group ("Amazon EC2 service quotas", EC2 User Guide):
# (first letter of the type, capacity) -> (quota code, quota name), in Service Quotas' service "ec2".
_GPU_QUOTAS: Mapping[tuple[str, str], tuple[str, str]] = {
    ("g", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("p", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("g", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("p", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
}
_CAPACITY_CODES = {
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "UnsupportedAvailabilityZoneException",
    "AsgInstanceLaunchFailures",
}
_THROTTLE_CODES = {
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
}


def ami_type(instance_type: str) -> str:
    """EKS's accelerated AL2023 AMI type for an NVIDIA instance type (pure)."""
    if instance_type.startswith(_ARM_FAMILIES):
        return "AL2023_ARM_64_NVIDIA"
    return "AL2023_x86_64_NVIDIA"


def to_request(
    spec: PoolSpec,
    token: str,
    cluster: str,
    node_role_arn: str,
    subnets: list[str],
    ami: str | None = None,
) -> dict[str, Any]:
    """The CreateNodegroup request for `spec` (pure)."""
    return {
        "clusterName": cluster,
        "nodegroupName": spec.name,
        "scalingConfig": {"minSize": 0, "maxSize": max(spec.nodes, 1), "desiredSize": spec.nodes},
        "subnets": subnets,
        "instanceTypes": [spec.offer.instance_type],
        "amiType": ami or ami_type(spec.offer.instance_type),
        "capacityType": "SPOT" if spec.offer.capacity == "spot" else "ON_DEMAND",
        "labels": spec.node_labels(),
        "taints": [
            {"key": t.key, "value": t.value, "effect": _EFFECTS[t.effect]}
            for t in spec.node_taints()
        ],
        # These tag the node group only: EKS does not pass them on to its instances. Bills match
        # instances by the tags EKS adds itself (aws:eks:cluster-name, eks:nodegroup-name).
        "tags": spec.tags(token),
        "clientRequestToken": token,
        "nodeRole": node_role_arn,
    }


def to_pool(nodegroup: Mapping[str, Any]) -> Pool:
    """A DescribeNodegroup answer as a Pool (pure)."""
    tags = dict(nodegroup.get("tags") or {})
    issues = (nodegroup.get("health") or {}).get("issues") or []
    message = "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues)
    scaling = nodegroup.get("scalingConfig") or {}
    phase = _PHASES.get(str(nodegroup.get("status")), "failed")
    if phase in ("creating", "resizing") and any(i.get("code") in _LAUNCH_ISSUES for i in issues):
        phase = "failed"
    return Pool(
        name=tags.get(TAG_POOL, nodegroup["nodegroupName"]),
        phase=phase,
        nodes=int(scaling.get("desiredSize", 0)),
        instance_type=(nodegroup.get("instanceTypes") or [""])[0],
        capacity="spot" if nodegroup.get("capacityType") == "SPOT" else "on-demand",
        tags=tags,
        external_id=str(nodegroup.get("nodegroupArn", "")),
        message=message,
    )


def map_error(
    code: str, message: str, status: int | None = None, retry_after: float | None = None
) -> ProviderError:
    """An EKS error code as burst's typed error (pure)."""
    if code == "ResourceNotFoundException":
        return PoolNotFound(message)
    if code in _THROTTLE_CODES or status == 429:
        return Throttled(message, retry_after or 1.0)
    if code in _CAPACITY_CODES or "InsufficientInstanceCapacity" in message:
        return CapacityUnavailable(message)
    if code in ("ResourceLimitExceededException", "ServiceQuotaExceededException"):
        return QuotaExceeded(message)
    if code == "ResourceInUseException":
        # 409: an update is running on the node group (or the name is taken, which create_pool
        # resolves by describing it). Either way, later is the answer.
        return ProviderUnavailable(f"{code}: {message}")
    if code in (
        "InvalidParameterException",
        "InvalidRequestException",
        "AccessDeniedException",
        "UnauthorizedOperation",
    ):
        return InvalidRequest(f"{code}: {message}")
    if (status is not None and status >= 500) or code in (
        "ServerException",
        "ServiceUnavailableException",
    ):
        return ProviderUnavailable(f"{code}: {message}")
    return InvalidRequest(f"{code}: {message}")


class AwsProvider:
    name = "aws"

    def __init__(
        self,
        *,
        region: str,
        cluster: str,
        offers: Callable[[], list[Offer]],
        node_role_arn: str,
        subnets: list[str],
        ami_type: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        client: Any = None,
        throttle: TokenBucket | None = None,
        read_timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        prices: AwsPrices | None = None,
    ) -> None:
        self.region, self.cluster = region, cluster
        self.prices = prices or AwsPrices(
            region, offers, SystemClock(), profile=profile, endpoint_url=endpoint_url
        )
        self._offers = offers
        self._node_role_arn, self._subnets, self._ami_type = node_role_arn, subnets, ami_type
        self._throttle = throttle or TokenBucket(rate=5, burst=10)
        self._sleep = sleep
        self._profile, self._endpoint_url, self._read_timeout = profile, endpoint_url, read_timeout
        self._client = client  # made on first use: a missing profile is an error of that call
        # STS's regional endpoint, where EKS validates the tokens (None: boto3's own).
        self._sts_endpoint = f"https://sts.{region}.amazonaws.com" if endpoint_url is None else None

    @property
    def _eks(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            session = boto3.session.Session(profile_name=self._profile, region_name=self.region)
            self._client = session.client(
                "eks",
                endpoint_url=self._endpoint_url,
                config=Config(
                    retries={"max_attempts": 1, "mode": "standard"},
                    connect_timeout=10,
                    read_timeout=self._read_timeout,
                ),
            )
        return self._client

    def _call(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            ParamValidationError,
            ProfileNotFound,
        )

        def once() -> Any:
            self._throttle.take()
            try:
                return getattr(self._eks, operation)(**kwargs)
            except ProfileNotFound:
                raise InvalidRequest(f"AWS profile {self._profile!r} is not configured") from None
            except ClientError as exc:
                error = exc.response.get("Error", {})
                meta = exc.response.get("ResponseMetadata", {})
                after = (meta.get("HTTPHeaders") or {}).get("retry-after")
                raise map_error(
                    str(error.get("Code", "")),
                    str(error.get("Message", "")),
                    meta.get("HTTPStatusCode"),
                    float(after) if after else None,
                ) from None
            except NoCredentialsError:
                raise InvalidRequest("no AWS credentials found in the standard chain") from None
            except ParamValidationError as exc:  # refused before sending: never right on a retry
                raise InvalidRequest(f"EKS {operation}: {exc}") from None
            except BotoCoreError as exc:
                raise ProviderUnavailable(f"EKS {operation}: {exc.__class__.__name__}") from None

        return with_retries(once, sleep=self._sleep)

    def cluster_access(self) -> ClusterAccess:
        """The EKS cluster's endpoint and CA, and tokens as aws-iam-authenticator makes them: a
        presigned STS GetCallerIdentity URL that names the cluster in its signed x-k8s-aws-id
        header, valid 15 minutes (no exec plugin, no aws CLI in the image)."""
        import base64

        cluster = self._call("describe_cluster", name=self.cluster)["cluster"]
        ca = (cluster.get("certificateAuthority") or {}).get("data")
        return ClusterAccess(
            host=cluster["endpoint"],
            ca_pem=base64.b64decode(ca) if ca else None,
            token=self.cluster_token,
        )

    def cluster_state(self) -> tuple[bool, str]:
        """Whether the EKS cluster is there and active, in words (read-only)."""
        cluster = self._call("describe_cluster", name=self.cluster)["cluster"]
        status = cluster.get("status", "?")
        return (
            status == "ACTIVE",
            f"EKS {self.cluster}: {status}, Kubernetes {cluster.get('version')}",
        )

    def gpu_quotas(self, offers: list[Offer]) -> list[tuple[bool, str]]:
        """Each EC2 vCPU quota the offers fall under, against the smallest offer it must hold
        (read-only; one line per quota)."""
        from botocore.exceptions import BotoCoreError, ClientError

        needed: dict[str, tuple[str, int, str]] = {}  # quota code -> (name, vCPUs, smallest type)
        for o in offers:
            quota = _GPU_QUOTAS.get((o.instance_type[0], o.capacity))
            if quota is None or o.region != self.region:
                continue
            code, name = quota
            vcpus = int(o.vcpus)
            if code not in needed or vcpus < needed[code][1]:
                needed[code] = (name, vcpus, o.instance_type)
        lines = []
        for code, (name, vcpus, smallest) in sorted(needed.items()):
            try:
                answer = self._quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)
            except (BotoCoreError, ClientError) as exc:  # reported: the check reads on
                lines.append((False, f"{name} ({code}): not readable: {error_code(exc)}"))
                continue
            value = int(answer["Quota"]["Value"])
            lines.append(
                (
                    value >= vcpus,
                    f"{name} ({code}): {value} vCPUs; {smallest} needs {vcpus}",
                )
            )
        return lines

    @property
    def _quotas(self) -> Any:
        import boto3

        session = boto3.session.Session(profile_name=self._profile, region_name=self.region)
        return session.client("service-quotas", endpoint_url=self._endpoint_url)

    def cluster_token(self) -> tuple[str, datetime]:
        import base64

        import boto3

        session = boto3.session.Session(profile_name=self._profile, region_name=self.region)
        sts = session.client("sts", region_name=self.region, endpoint_url=self._sts_endpoint)

        def name_the_cluster(request: Any, **_: Any) -> None:
            request.headers["x-k8s-aws-id"] = self.cluster

        sts.meta.events.register("before-sign.sts.GetCallerIdentity", name_the_cluster)
        url = sts.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        # Valid 15 minutes from signing; taken for 14, so that no request carries a stale one.
        return token, datetime.now(UTC) + timedelta(minutes=14)

    def offers(self) -> list[Offer]:
        """The region's offers at the last live prices fetched, else the static catalog's."""
        return self.prices.offers()

    def refresh_prices(self) -> list[str]:
        return self.prices.refresh()

    def _ours(self, nodegroup: Mapping[str, Any], owner: str | None = None) -> bool:
        tags = nodegroup.get("tags") or {}
        return TAG_OWNER in tags and (owner is None or tags[TAG_OWNER] == owner)

    def _describe(self, name: str) -> Mapping[str, Any]:
        found = self._call("describe_nodegroup", clusterName=self.cluster, nodegroupName=name)
        nodegroup: Mapping[str, Any] = found["nodegroup"]
        if not self._ours(nodegroup):
            raise PoolNotFound(f"node group {name} is not burst's")
        return nodegroup

    def create_pool(self, spec: PoolSpec, token: str) -> Pool:
        request = to_request(
            spec, token, self.cluster, self._node_role_arn, self._subnets, self._ami_type
        )
        try:
            return to_pool(self._call("create_nodegroup", **request)["nodegroup"])
        except (InvalidRequest, ProviderUnavailable) as exc:
            # Already there (an earlier try that timed out on our side but succeeded)? Then it
            # is the pool, unless someone else's node group has the name.
            try:
                existing = self._call(
                    "describe_nodegroup", clusterName=self.cluster, nodegroupName=spec.name
                )["nodegroup"]
            except PoolNotFound:
                raise exc from None
            if (existing.get("tags") or {}).get(TAG_OWNER) != spec.owner:
                raise InvalidRequest(
                    f"a node group named {spec.name} exists and is not burst's"
                ) from None
            return to_pool(existing)

    def get_pool(self, name: str) -> Pool:
        return to_pool(self._describe(name))

    def resize_pool(self, name: str, nodes: int) -> Pool:
        current = self._describe(name)
        scaling = dict(current.get("scalingConfig") or {})
        scaling.update(desiredSize=nodes, maxSize=max(nodes, int(scaling.get("maxSize", 1)), 1))
        self._call(
            "update_nodegroup_config",
            clusterName=self.cluster,
            nodegroupName=name,
            scalingConfig=scaling,
        )
        return self.get_pool(name)

    def delete_pool(self, name: str) -> None:
        try:
            self._describe(name)
            self._call("delete_nodegroup", clusterName=self.cluster, nodegroupName=name)
        except PoolNotFound:
            return

    def list_pools(self, owner: str) -> list[Pool]:
        names: list[str] = []
        token: str | None = None
        while True:
            page = self._call(
                "list_nodegroups",
                clusterName=self.cluster,
                **({"nextToken": token} if token else {}),
            )
            names += page.get("nodegroups", [])
            token = page.get("nextToken")
            if not token:
                break
        pools = []
        for name in sorted(names):
            try:
                nodegroup = self._call(
                    "describe_nodegroup", clusterName=self.cluster, nodegroupName=name
                )["nodegroup"]
            except PoolNotFound:
                continue  # deleted between list and describe
            if self._ours(nodegroup, owner):
                pools.append(to_pool(nodegroup))
        return pools

    def ended_instances(self, name: str) -> tuple[Instance, ...] | None:
        # EKS reports a node group's size, not its instances (those are EC2's, which lists
        # terminated ones for about an hour): a pool gone behind burst's back is billed to when
        # burst saw it gone, and `burst reconcile` takes the difference from the bill.
        return None

"""Azure: GPU node pools as AKS agent pools, through azure-mgmt-containerservice.

Pure translators (`cloud_name`, `azure_tags`, `to_agent_pool`, `to_pool`, `map_error`) and a
thin client. AKS Linux agent pool names are at most 12 lower-case letters and digits, so the
cloud name is a hash of burst's logical name, which travels in the `burst-pool` tag. Azure tag
names may not contain `/`, so burst's tags are written `burst-owner`, `burst-pool`, ... Spot pools
use eviction policy Delete and the offer's price as their max price. Credentials come from
azure-identity's DefaultAzureCredential chain (or a managed identity the target names); never
logged or stored.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

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
from burst.model import (
    FLAT_TAG_OWNER,
    FLAT_TAG_POOL,
    ClusterAccess,
    Offer,
    flat_tag_key,
    unflat_tag_key,
)

_PHASES: Mapping[str, PoolPhase] = {
    "Creating": "creating",
    "Succeeded": "ready",
    "Updating": "resizing",
    "Scaling": "resizing",
    "Deleting": "deleting",
    "Failed": "failed",
    "Canceled": "failed",
    "Upgrading": "ready",
}
# The AKS server application (AKS-managed Entra ID): tokens for it open the cluster's API.
AKS_SERVER_SCOPE = "6dae42f8-4368-4678-94ff-3960e28e3630/.default"
_CAPACITY_CODES = {
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
}
_READ_ONLY = {
    "provisioningState",
    "powerState",
    "nodeImageVersion",
    "currentOrchestratorVersion",
    "eTag",
}
_QUOTA_CODES = {"QuotaExceeded", "OperationNotAllowed", "InsufficientVCPUQuota"}


def cloud_name(name: str) -> str:
    """An AKS Linux agent pool name (<= 12 lower-case letters and digits) for a logical name."""
    return "b" + hashlib.sha256(name.encode()).hexdigest()[:11]


def azure_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {flat_tag_key(key): value for key, value in tags.items()}


def to_agent_pool(spec: PoolSpec, token: str) -> dict[str, Any]:
    """The agent pool body for `spec` (pure; the ARM JSON the client sends)."""
    spot = spec.offer.capacity == "spot"
    properties: dict[str, Any] = {
        "count": spec.nodes,
        "vmSize": spec.offer.instance_type,
        "mode": "User",
        "osType": "Linux",
        "type": "VirtualMachineScaleSets",
        "nodeLabels": spec.node_labels(),
        "nodeTaints": [f"{t.key}={t.value}:{t.effect}" for t in spec.node_taints()],
        "tags": azure_tags(spec.tags(token)),
        "scaleSetPriority": "Spot" if spot else "Regular",
    }
    if spot:
        properties["scaleSetEvictionPolicy"] = "Delete"
        properties["spotMaxPrice"] = (
            float(spec.spot_max_price_usd) if spec.spot_max_price_usd else -1
        )
    if spec.zones:
        properties["availabilityZones"] = list(spec.zones)
    return {"properties": properties}


def to_pool(agent_pool: Mapping[str, Any]) -> Pool:
    """An agent pool (ARM JSON, as the SDK model's as_dict() gives it too) as a Pool (pure)."""
    props = agent_pool.get("properties") or {}
    tags = dict(props.get("tags") or {})
    state = str(props.get("provisioningState") or "")
    priority = props.get("scaleSetPriority")
    return Pool(
        name=tags.get(FLAT_TAG_POOL, str(agent_pool.get("name", ""))),
        phase=_PHASES.get(state, "creating" if not state else "failed"),
        nodes=int(props.get("count") or 0),
        instance_type=str(props.get("vmSize") or ""),
        capacity="spot" if priority == "Spot" else "on-demand",
        tags={unflat_tag_key(k): v for k, v in tags.items()},
        external_id=str(agent_pool.get("id", "")),
        message=state,
    )


def map_error(
    status: int,
    code: str,
    message: str,
    retry_after: float | None = None,
    details: Sequence[str] = (),
) -> ProviderError:
    """An ARM error as a typed error (pure). Capacity codes often sit in error.details under a
    generic top-level code (ResourceOperationFailure, InvalidTemplateDeployment); 409
    OperationNotAllowed is a wait while another operation runs, a quota when it says quota."""
    text = f"{code}: {message}" if code else message
    if code in _CAPACITY_CODES or any(d in _CAPACITY_CODES for d in details):
        return CapacityUnavailable(f"{text} ({', '.join(details)})" if details else text)
    if code == "OperationNotAllowed" and "in progress" in message:
        return ProviderUnavailable(text)
    if (
        code in _QUOTA_CODES
        or any(d in _QUOTA_CODES for d in details)
        or "quota" in message.lower()
    ):
        return QuotaExceeded(text)
    if status == 404 or code in ("NotFound", "ResourceNotFound"):
        return PoolNotFound(text)
    if status == 429:
        return Throttled(text, retry_after or 1.0)
    if status >= 500 or status == 0:
        return ProviderUnavailable(text)
    return InvalidRequest(text)


class AzureProvider:
    name = "azure"

    def __init__(
        self,
        *,
        subscription_id: str,
        resource_group: str,
        cluster: str,
        region: str,
        offers: Callable[[], list[Offer]],
        managed_identity_client_id: str | None = None,
        client: Any = None,
        credential: Any = None,
        throttle: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.region = region
        self._group, self._cluster = resource_group, cluster
        self._offers = offers
        self._throttle = throttle or TokenBucket(rate=5, burst=10)
        self._sleep = sleep
        self._identity = managed_identity_client_id
        self._subscription = subscription_id
        self._client = client  # made on first use
        self._identity_credential = credential

    @property
    def _credential(self) -> Any:
        if self._identity_credential is None:
            from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

            self._identity_credential = (
                ManagedIdentityCredential(client_id=self._identity)
                if self._identity
                else DefaultAzureCredential()
            )
        return self._identity_credential

    @property
    def _service(self) -> Any:
        if self._client is None:
            from azure.mgmt.containerservice import ContainerServiceClient

            # retry_total=0: burst retries itself, honouring Retry-After, without blocking the SDK.
            self._client = ContainerServiceClient(
                self._credential, self._subscription, retry_total=0
            )
        return self._client

    @property
    def _aks(self) -> Any:
        return self._service.agent_pools

    def cluster_access(self) -> ClusterAccess:
        """The AKS cluster's endpoint and CA (from its user kubeconfig), and Entra ID tokens for
        the AKS server application, as kubelogin gets them (no exec plugin in the image)."""
        import base64

        import yaml

        result = self._service.managed_clusters.list_cluster_user_credentials(
            self._group, self._cluster
        )
        config = yaml.safe_load(result.kubeconfigs[0].value)
        cluster = config["clusters"][0]["cluster"]
        ca = cluster.get("certificate-authority-data")
        return ClusterAccess(
            host=cluster["server"],
            ca_pem=base64.b64decode(ca) if ca else None,
            token=self.cluster_token,
        )

    def cluster_state(self) -> tuple[bool, str]:
        """Whether the AKS cluster is there and running, in words (read-only)."""
        cluster = self._call("managed_clusters.get", self._group, self._cluster)
        state = cluster.provisioning_state
        power = getattr(cluster.power_state, "code", None) or "unknown"
        return state == "Succeeded" and power == "Running", (
            f"AKS {self._cluster}: {state}, {power}, Kubernetes {cluster.kubernetes_version}"
        )

    def cluster_token(self) -> tuple[str, datetime]:
        token = self._credential.get_token(AKS_SERVER_SCOPE)
        return token.token, datetime.fromtimestamp(token.expires_on, UTC) - timedelta(minutes=1)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        def once() -> Any:
            self._throttle.take()
            try:
                # A begin_ call is started, not waited for: no poller thread, no pass blocked on
                # AKS, and a polling error can never send the PUT again; later passes read it.
                extra = {"polling": False} if method.startswith("begin_") else {}
                # "managed_clusters.get": another operation group than the agent pools.
                group, _, name = method.rpartition(".")
                on = getattr(self._service, group) if group else self._aks
                result = getattr(on, name)(*args, **kwargs, **extra)
                if method.startswith("begin_"):
                    return None
                return list(result) if method == "list" else result  # pages are fetched lazily
            except ClientAuthenticationError as exc:
                # The first line says which: none found in the chain, or refused by Entra ID.
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "refused"
                raise InvalidRequest(f"Azure credentials: {first}") from None
            except (ServiceRequestError, ServiceResponseError) as exc:
                raise ProviderUnavailable(f"AKS {method}: {exc.__class__.__name__}") from None
            except HttpResponseError as exc:
                code = getattr(exc.error, "code", None) or ""
                status = int(exc.status_code or 0)
                after = (getattr(exc.response, "headers", None) or {}).get("Retry-After")
                nested = [
                    str(getattr(d, "code", "") or "")
                    for d in getattr(exc.error, "details", None) or []
                ]
                raise map_error(
                    status,
                    str(code),
                    str(getattr(exc.error, "message", None) or exc.message),
                    float(after) if after else None,
                    nested,
                ) from None

        return with_retries(once, sleep=self._sleep)

    def _read(self, name: str, ours_only: bool = True) -> Mapping[str, Any]:
        found = self._call("get", self._group, self._cluster, cloud_name(name))
        data: dict[str, Any] = found.as_dict()
        if ours_only and FLAT_TAG_OWNER not in _tags(data):
            raise PoolNotFound(f"agent pool {name} is not burst's")
        return data

    def offers(self) -> list[Offer]:
        return [o for o in self._offers() if o.cloud == "azure" and o.region == self.region]

    def create_pool(self, spec: PoolSpec, token: str) -> Pool:
        # ARM's PUT creates or updates: look first, so that a pool that exists is never changed
        # by a create, and someone else's pool of that name is never touched.
        try:
            existing = self._read(spec.name, ours_only=False)
        except PoolNotFound:
            existing = None
        if existing is not None:
            if _tags(existing).get(FLAT_TAG_OWNER) != spec.owner:
                raise InvalidRequest(
                    f"an agent pool named {cloud_name(spec.name)} exists and is not burst's"
                )
            return to_pool(existing)
        self._call(
            "begin_create_or_update",
            self._group,
            self._cluster,
            cloud_name(spec.name),
            to_agent_pool(spec, token),
        )
        return self.get_pool(spec.name)

    def get_pool(self, name: str) -> Pool:
        return to_pool(self._read(name))

    def resize_pool(self, name: str, nodes: int) -> Pool:
        current = self._read(name)
        writable = {
            k: v for k, v in (current.get("properties") or {}).items() if k not in _READ_ONLY
        }
        body = {"properties": {**writable, "count": nodes}}
        self._call(
            "begin_create_or_update",
            self._group,
            self._cluster,
            cloud_name(name),
            body,
        )
        return self.get_pool(name)

    def delete_pool(self, name: str) -> None:
        try:
            self._read(name)
            self._call(
                "begin_delete",
                self._group,
                self._cluster,
                cloud_name(name),
            )
        except PoolNotFound:
            return

    def list_pools(self, owner: str) -> list[Pool]:
        pools = []
        for found in self._call("list", self._group, self._cluster):
            data = found.as_dict()
            if _tags(data).get(FLAT_TAG_OWNER) == owner:
                pools.append(to_pool(data))
        return sorted(pools, key=lambda p: p.name)

    def ended_instances(self, name: str) -> tuple[Instance, ...] | None:
        # AKS reports an agent pool's count, not its scale set's VMs (gone with the pool): a pool
        # gone behind burst's back is billed to when burst saw it gone, and `burst reconcile`
        # takes the difference from the bill.
        return None


def _tags(agent_pool: Mapping[str, Any]) -> dict[str, str]:
    return dict((agent_pool.get("properties") or {}).get("tags") or {})

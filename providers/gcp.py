"""GCP: GPU node pools as GKE node pools, through google-cloud-container (`parent`/`name` forms).

Pure translators (`cloud_name`, `to_node_pool`, `to_pool`, `map_error`) and a thin client. GCE
resource labels allow only `[a-z0-9_-]`, so burst's tags become `burst-owner`, `burst-pool`, ...;
node pool names are at most 40 characters, so long logical names are shortened with a hash and the
logical name kept in the `burst-pool` label. Credentials: Application Default Credentials, or the
service-account key file the target names; never logged or stored.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
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
    is_flat_burst_key,
    unflat_tag_key,
)

ACCELERATOR_TYPES = {
    "V100": "nvidia-tesla-v100",
    "T4": "nvidia-tesla-t4",
    "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4",
    "A100": "nvidia-tesla-a100",
    "A100-80GB": "nvidia-a100-80gb",
    "L4": "nvidia-l4",
    "H100": "nvidia-h100-80gb",
    "H100-MEGA": "nvidia-h100-mega-80gb",
    "H200": "nvidia-h200-141gb",
    "B200": "nvidia-b200",
}
_EFFECTS = {"NoSchedule": 1, "PreferNoSchedule": 2, "NoExecute": 3}
# RUNNING_WITH_ERROR (3) is a pool that did not get all it asked for (a stockout, a quota): not
# ready (terraform-provider-google treats it as an error too).
_PHASES: Mapping[int, PoolPhase] = {
    1: "creating",
    2: "ready",
    3: "failed",
    4: "resizing",
    5: "deleting",
    6: "failed",
}
_STATUS_NAMES = {
    "PROVISIONING": 1,
    "RUNNING": 2,
    "RUNNING_WITH_ERROR": 3,
    "RECONCILING": 4,
    "STOPPING": 5,
    "ERROR": 6,
}
_CAPACITY_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "does not have enough resources")
_CONDITIONS = {1: "GCE_STOCKOUT", 2: "GKE_SERVICE_ACCOUNT_DELETED", 3: "GCE_QUOTA_EXCEEDED"}
OP_DONE = 3


def cloud_name(name: str) -> str:
    """A GKE node pool name (<= 40 chars, lower-case, starts with a letter) for a logical name."""
    clean = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "pool"
    if not clean[0].isalpha():
        clean = "p-" + clean
    if len(clean) <= 40:
        return clean
    return clean[:31].rstrip("-") + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]


def gce_labels(tags: Mapping[str, str]) -> dict[str, str]:
    """burst's tags as GCE resource labels: `burst.dev/owner` -> `burst-owner`, values cleaned."""
    out = {}
    for key, value in tags.items():
        k = re.sub(r"[^a-z0-9_-]", "-", flat_tag_key(key.lower()))[:63]
        out[k] = re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]
    return out


def _labels(node_pool: Mapping[str, Any]) -> dict[str, str]:
    return dict((node_pool.get("config") or {}).get("resource_labels") or {})


def to_node_pool(spec: PoolSpec, token: str) -> dict[str, Any]:
    """The NodePool to create for `spec` (pure; snake_case fields as the client's types take)."""
    accelerator = ACCELERATOR_TYPES.get(spec.offer.accelerator)
    if accelerator is None:
        raise InvalidRequest(f"GKE has no accelerator type for {spec.offer.accelerator}")
    config: dict[str, Any] = {
        "machine_type": spec.offer.instance_type,
        "labels": spec.node_labels(),
        "taints": [
            {"key": t.key, "value": t.value, "effect": _EFFECTS[t.effect]}
            for t in spec.node_taints()
        ],
        "resource_labels": gce_labels(spec.tags(token)),
        "spot": spec.offer.capacity == "spot",
    }
    # Every GPU machine family states its GPUs: N1 gets them attached, A2/A3/G2 have them built
    # in and GKE still wants them listed with the machine's count; without the driver setting no
    # driver is installed (AcceleratorConfig.gpu_driver_installation_config).
    config["accelerators"] = [
        {
            "accelerator_count": spec.offer.gpus,
            "accelerator_type": accelerator,
            "gpu_driver_installation_config": {"gpu_driver_version": 2},  # DEFAULT
        }
    ]
    pool: dict[str, Any] = {
        "name": cloud_name(spec.name),
        "config": config,
        # Per zone: one zone, so the count is the pool's (a regional cluster would triple it).
        "initial_node_count": spec.nodes,
        "locations": list(spec.zones[:1]),
    }
    if not spec.zones:
        raise InvalidRequest(
            f"no zone of {spec.offer.region} is known to have {spec.offer.instance_type}: "
            "a pool across the cluster's zones would have a node count per zone"
        )
    return pool


def to_pool(node_pool: Mapping[str, Any]) -> Pool:
    """A NodePool (as a dict) as a Pool (pure): nodes as GKE bills them (per zone x zones), and
    the conditions (stockout, quota) as its message (status_message is deprecated)."""
    config = node_pool.get("config") or {}
    labels = _labels(node_pool)
    status = node_pool.get("status", 0)
    code = _STATUS_NAMES.get(status, 0) if isinstance(status, str) else int(status)
    tags = {unflat_tag_key(k): v for k, v in labels.items() if is_flat_burst_key(k)}
    zones = max(1, len(node_pool.get("locations") or []))
    conditions = "; ".join(
        f"{_CONDITIONS.get(int(c.get('code', 0)), 'UNKNOWN')}: {c.get('message', '')}"
        for c in node_pool.get("conditions") or []
    )
    return Pool(
        name=labels.get(FLAT_TAG_POOL, node_pool.get("name", "")),
        phase=_PHASES.get(code, "failed"),
        nodes=int(node_pool.get("initial_node_count", 0)) * zones,
        instance_type=str(config.get("machine_type", "")),
        capacity="spot" if config.get("spot") else "on-demand",
        tags=tags,
        external_id=str(node_pool.get("self_link", "")),
        message=conditions or str(node_pool.get("status_message", "")),
    )


def map_error(status: int, message: str, retry_after: float | None = None) -> ProviderError:
    """An HTTP status (or an operation's google.rpc code mapped to one) as a typed error (pure).
    The status decides first: 429 "Too many operations ... concurrent operations quota" is a
    wait, not a quota, and 400 FAILED_PRECONDITION "is currently creating a node pool" is a
    retry (terraform-provider-google retries both: tpgresource/utils.go)."""
    if status == 404:
        return PoolNotFound(message)
    if status == 429 and "Too many operations" in message:
        return Throttled(message, retry_after or 5.0)
    if status == 400 and ("Please wait and try again" in message or "is currently" in message):
        return ProviderUnavailable(message)
    if any(marker in message for marker in _CAPACITY_MARKERS):
        return CapacityUnavailable(message)
    if "quota" in message.lower():
        return QuotaExceeded(message)
    if status == 429:
        return Throttled(message, retry_after or 5.0)
    if status >= 500 or status == 0:
        return ProviderUnavailable(message)
    return InvalidRequest(message)


# google.rpc.Code of a failed operation -> the HTTP status that carries it.
_RPC_TO_HTTP = {3: 400, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 13: 500, 14: 503}


class GcpProvider:
    name = "gcp"

    def __init__(
        self,
        *,
        project: str,
        location: str,
        cluster: str,
        region: str,
        offers: Callable[[], list[Offer]],
        credentials_file: str | None = None,
        client: Any = None,
        throttle: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.region = region
        self._location = f"projects/{project}/locations/{location}"
        self._parent = f"{self._location}/clusters/{cluster}"
        self._offers = offers
        self._throttle = throttle or TokenBucket(rate=5, burst=10)
        self._sleep = sleep
        self._credentials_file = credentials_file
        self._client = client  # made on first use: finding credentials may need the network
        self._token_credentials: Any = None

    @property
    def _gke(self) -> Any:
        if self._client is None:
            from google.cloud import container_v1

            self._client = container_v1.ClusterManagerClient(credentials=self._credentials())
        return self._client

    def _credentials(self) -> Any:
        """The target's key file, else Application Default Credentials (cloud-platform scope)."""
        scopes = ["https://www.googleapis.com/auth/cloud-platform"]
        if self._credentials_file:
            from google.oauth2 import service_account

            try:
                return service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                    self._credentials_file, scopes=scopes
                )
            except (OSError, ValueError) as exc:
                raise InvalidRequest(
                    f"Google key file {self._credentials_file}: {exc.__class__.__name__}"
                ) from None
        import google.auth

        credentials, _ = google.auth.default(scopes=scopes)
        return credentials

    def cluster_access(self) -> ClusterAccess:
        """The GKE cluster's endpoint and CA, and OAuth access tokens of the same credentials the
        container API uses (what gke-gcloud-auth-plugin hands kubectl)."""
        import base64

        cluster = self._call("get_cluster", name=self._parent)
        ca = cluster.master_auth.cluster_ca_certificate
        return ClusterAccess(
            host=f"https://{cluster.endpoint}",
            ca_pem=base64.b64decode(ca) if ca else None,
            token=self.cluster_token,
        )

    def cluster_state(self) -> tuple[bool, str]:
        """Whether the GKE cluster is there and serving, in words (read-only)."""
        cluster = self._call("get_cluster", name=self._parent)
        status = cluster.status.name
        return status in ("RUNNING", "RECONCILING"), (
            f"GKE {self._parent}: {status}, Kubernetes {cluster.current_master_version or '?'}"
        )

    def cluster_token(self) -> tuple[str, datetime]:
        from google.auth import exceptions as auth_exceptions
        from google.auth.transport.requests import Request

        try:
            credentials = self._token_credentials or self._credentials()
            self._token_credentials = credentials
            credentials.refresh(Request())
        except (auth_exceptions.DefaultCredentialsError, auth_exceptions.RefreshError) as exc:
            raise InvalidRequest(f"Google credentials: {exc.__class__.__name__}") from None
        expiry = credentials.expiry or datetime.now(UTC).replace(tzinfo=None) + timedelta(
            minutes=30
        )
        return credentials.token, expiry.replace(tzinfo=UTC) - timedelta(minutes=1)

    def _call(self, method: str, **kwargs: Any) -> Any:
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exceptions

        def once() -> Any:
            self._throttle.take()
            try:
                return getattr(self._gke, method)(**kwargs)
            except gexc.GoogleAPICallError as exc:
                status = int(exc.code or 0) if isinstance(exc.code, int) else 0
                after = None
                response = getattr(exc, "response", None)
                if response is not None and getattr(response, "headers", None):
                    value = response.headers.get("Retry-After")
                    after = float(value) if value else None
                raise map_error(status, str(exc.message), after) from None
            except gexc.RetryError as exc:
                raise ProviderUnavailable(f"GKE {method}: {exc}") from None
            except auth_exceptions.GoogleAuthError as exc:
                # Missing, unreadable or revoked credentials: not an API error, but no call
                # succeeds until an admin fixes them.
                raise InvalidRequest(
                    f"Google credentials: {exc.__class__.__name__}: {str(exc).split('.')[0]}"
                ) from None
            except (OSError, TimeoutError) as exc:
                raise ProviderUnavailable(f"GKE {method}: {exc.__class__.__name__}") from None

        return with_retries(once, sleep=self._sleep)

    def _failed(self, operation: Any) -> None:
        """Raise an operation's error if it already ended with one. Operations are not waited
        for: a pass starts them and later passes read the pool, never blocking on GKE."""
        if int(operation.status) == OP_DONE and operation.error and operation.error.code:
            raise map_error(
                _RPC_TO_HTTP.get(int(operation.error.code), 500), str(operation.error.message)
            )

    def _read(self, name: str, ours_only: bool = True) -> Mapping[str, Any]:
        from google.cloud import container_v1

        found = self._call("get_node_pool", name=f"{self._parent}/nodePools/{cloud_name(name)}")
        data: Mapping[str, Any] = container_v1.NodePool.to_dict(found, use_integers_for_enums=True)
        if ours_only and FLAT_TAG_OWNER not in _labels(data):
            raise PoolNotFound(f"node pool {name} is not burst's")
        return data

    def offers(self) -> list[Offer]:
        return [o for o in self._offers() if o.cloud == "gcp" and o.region == self.region]

    def create_pool(self, spec: PoolSpec, token: str) -> Pool:
        from google.cloud import container_v1

        node_pool = container_v1.NodePool(to_node_pool(spec, token))
        request = container_v1.CreateNodePoolRequest(parent=self._parent, node_pool=node_pool)
        try:
            operation = self._call("create_node_pool", request=request)
        except (InvalidRequest, ProviderUnavailable) as exc:
            try:
                existing = self._read(spec.name, ours_only=False)
            except PoolNotFound:
                raise exc from None
            owner = _labels(existing).get(FLAT_TAG_OWNER)
            if owner != gce_labels({"o": spec.owner})["o"]:
                raise InvalidRequest(
                    f"a node pool named {cloud_name(spec.name)} exists and is not burst's"
                ) from None
            return to_pool(existing)
        self._failed(operation)
        return self.get_pool(spec.name)  # PROVISIONING: later passes follow it

    def get_pool(self, name: str) -> Pool:
        return to_pool(self._read(name))

    def resize_pool(self, name: str, nodes: int) -> Pool:
        from google.cloud import container_v1

        self._read(name)
        request = container_v1.SetNodePoolSizeRequest(
            name=f"{self._parent}/nodePools/{cloud_name(name)}", node_count=nodes
        )
        self._failed(self._call("set_node_pool_size", request=request))
        return self.get_pool(name)  # RECONCILING: later passes follow it

    def delete_pool(self, name: str) -> None:
        try:
            self._read(name)
            operation = self._call(
                "delete_node_pool", name=f"{self._parent}/nodePools/{cloud_name(name)}"
            )
            self._failed(operation)  # STOPPING: done when the pool is gone
        except PoolNotFound:
            return

    def list_pools(self, owner: str) -> list[Pool]:
        from google.cloud import container_v1

        answer = self._call("list_node_pools", parent=self._parent)
        wanted = gce_labels({"o": owner})["o"]
        pools = []
        for node_pool in answer.node_pools:
            data = container_v1.NodePool.to_dict(node_pool, use_integers_for_enums=True)
            if _labels(data).get(FLAT_TAG_OWNER) == wanted:
                pools.append(to_pool(data))
        return sorted(pools, key=lambda p: p.name)

    def ended_instances(self, name: str) -> tuple[Instance, ...] | None:
        # GKE reports a node pool's size, not its instances (Compute Engine's managed instance
        # group drops a deleted one): a pool gone behind burst's back is billed to when burst saw
        # it gone, and `burst reconcile` takes the difference from the bill.
        return None

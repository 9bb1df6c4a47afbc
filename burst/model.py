"""The nouns of the flow: frozen dataclasses that every step passes around.

The decision (decide/) sees only these; the catalog produces Offers; providers turn PoolSpecs
into Pools. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from burst.amounts import Money

Cloud = Literal["aws", "gcp", "azure"]
CLOUDS: tuple[Cloud, ...] = ("aws", "gcp", "azure")
CapacityType = Literal["on-demand", "spot"]
CAPACITY_TYPES: tuple[CapacityType, ...] = ("on-demand", "spot")
PriceSource = Literal["catalog", "override", "discount", "live"]


@dataclass(frozen=True, slots=True)
class OfferKey:
    """What identifies an offer: capacity errors and back-off are remembered per key."""

    cloud: Cloud
    region: str
    instance_type: str
    capacity: CapacityType
    accelerator: str
    gpus: int

    def __str__(self) -> str:
        return (
            f"{self.cloud}/{self.region}/{self.instance_type}"
            f"+{self.gpus}x{self.accelerator}/{self.capacity}"
        )


@dataclass(frozen=True, slots=True)
class Offer:
    """One launchable node shape in one region at one capacity type, with its hourly price per node.

    For GCP `instance_type` is the host machine type and the GPUs are attached to it; the price is
    host + GPUs. `zones` lists where in the region the offer exists (empty where the cloud does not
    say, as for Azure).
    """

    cloud: Cloud
    region: str
    instance_type: str
    capacity: CapacityType
    accelerator: str
    gpus: int
    vcpus: float
    memory_gib: float
    hourly: Money
    price_source: PriceSource = "catalog"
    zones: tuple[str, ...] = ()

    key: OfferKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Computed once: the decision looks offers up by key in its inner loops.
        key = OfferKey(
            self.cloud, self.region, self.instance_type, self.capacity, self.accelerator, self.gpus
        )
        object.__setattr__(self, "key", key)


WorkloadKind = Literal["Job", "PyTorchJob"]
WorkloadPhase = Literal["pending", "planned", "started"]


# Where a runtime came from when nothing was declared or learned (the API's runtime_source).
DEFAULT_RUNTIME_SOURCE = "the policy's default"


@dataclass(frozen=True)
class Workload:
    """A local Job or PyTorchJob as the decision sees it.

    `phase` is `pending` (waiting for GPUs, or suspended waiting for burst), `planned` (a dispatch
    to `planned_pool` was decided earlier and not yet carried out) or `started` (it began running
    on-prem after all). `accelerator` is the requested GPU product in catalog terms (None: any).
    """

    uid: str
    kind: WorkloadKind
    namespace: str
    name: str
    team: str
    gpus_per_pod: int
    pods: int
    created: datetime
    pending_since: datetime
    accelerator: str | None = None
    burstable: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    deadline: datetime | None = None
    expected_runtime: timedelta | None = None
    # "declared", or where a learned estimate came from; "" when the policy's default applies
    # (stored as DEFAULT_RUNTIME_SOURCE with the dispatch)
    runtime_source: str = ""
    # Where the runtime is learned, the longest of the runs it is learned from: a run may take as
    # long, and a reuse that would then keep a node up for it alone is weighed so (decide/own.py).
    longest_runtime: timedelta | None = None
    max_cost: Money | None = None
    priority: int = 0
    cpu_per_pod: float = 0.0
    memory_gib_per_pod: float = 0.0
    quota_blocked: bool = False
    phase: WorkloadPhase = "pending"
    planned_pool: str | None = None
    # A copy of it in a cloud was lost (its node reclaimed, its pool or cluster gone): it may
    # burst again, but not onto spot where the policy leaves the choice to the decision.
    lost_copy: bool = False
    # A node lost under its copy would fail it (kube/translate.py fails_on_reclaim): no spot for
    # it either, on the same terms.
    fails_on_reclaim: bool = False

    @property
    def gpus(self) -> int:
        return self.gpus_per_pod * self.pods


@dataclass(frozen=True)
class RunningWorkload:
    """Something holding on-prem GPUs now, and when it is expected to let them go."""

    uid: str
    accelerator: str
    gpus: int
    expected_end: datetime
    started: datetime | None = None
    node: str = ""  # the node its GPUs are on ("": unknown, or the cluster has no node list)


@dataclass(frozen=True)
class OnPremNode:
    """A GPU node on-prem: its product (catalog name) and allocatable GPUs."""

    name: str
    accelerator: str
    gpus: int


@dataclass(frozen=True)
class OnPrem:
    """The on-prem cluster: GPUs per product (catalog names), its GPU nodes, what runs on them.

    With `nodes`, a pod needs its GPUs on one node, as the kube-scheduler's NodeResourcesFit
    filter asks (kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go: a node passes
    only if each requested resource fits its allocatable less what its pods request); without,
    each product's capacity is taken as one node (a snapshot written by hand)."""

    capacity: Mapping[str, int] = field(default_factory=dict)
    running: tuple[RunningWorkload, ...] = ()
    nodes: tuple[OnPremNode, ...] = ()

    @staticmethod
    def of_nodes(nodes: tuple[OnPremNode, ...], running: tuple[RunningWorkload, ...]) -> OnPrem:
        """The cluster of these nodes (its capacity their sum per product)."""
        capacity: dict[str, int] = {}
        for node in nodes:
            capacity[node.accelerator] = capacity.get(node.accelerator, 0) + node.gpus
        return OnPrem(capacity, running, nodes)


PoolState = Literal["requested", "creating", "ready", "draining", "deleting", "deleted", "failed"]


@dataclass(frozen=True)
class PoolView:
    """An existing pool as the decision sees it: its offer, size, and the GPUs free on each node."""

    name: str
    target: str
    policy: str
    offer: OfferKey
    nodes: int
    state: PoolState
    created: datetime
    free_gpus: tuple[int, ...] = ()  # per node; empty means every node is wholly free
    idle_since: datetime | None = None  # set when nothing runs on the pool
    hourly: Money | None = None  # per node, as priced when the pool was created
    # Per node, when the work known on it is expected to end (None: none on it); empty: unknown.
    busy_until: tuple[datetime | None, ...] = ()
    # Being resized: its first `nodes_up` nodes are up, the rest on their way since `resized_at`
    # (the pool runs its jobs meanwhile, and shows as ready). None: every node is up.
    nodes_up: int | None = None
    resized_at: datetime | None = None

    def free_per_node(self) -> list[int]:
        return list(self.free_gpus) if self.free_gpus else [self.offer.gpus] * self.nodes


@dataclass(frozen=True)
class BudgetView:
    """A budget's scope and what is left of it: amount - posted spend - held reservations."""

    name: str
    scope: Literal["team", "policy", "namespace"]
    value: str
    remaining: Money
    hard: bool = True


@dataclass(frozen=True)
class Snapshot:
    """Everything decide.plan() needs besides configuration and catalog; `taken_at` is when the
    world looked like this (`burst plan` plans at that time unless told otherwise)."""

    taken_at: datetime | None = None
    workloads: tuple[Workload, ...] = ()
    onprem: OnPrem = OnPrem()
    pools: tuple[PoolView, ...] = ()
    budgets: tuple[BudgetView, ...] = ()
    unavailable: tuple[OfferKey, ...] = ()
    # Targets whose cluster does not answer now: a pool there could be made, its copies not.
    silent_targets: tuple[str, ...] = ()
    # Workloads each policy sent to a cloud in the hour before `taken_at`, by policy name: how
    # often work comes, for the pools whose idle TTL is chosen against the next arrival.
    sent_last_hour: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CreatePool:
    pool: str
    target: str
    policy: str
    offer: OfferKey
    nodes: int
    hourly: Money  # per node, USD, as in the catalog
    reason: str
    estimated_cost: Money
    kind: Literal["create-pool"] = "create-pool"


@dataclass(frozen=True)
class ResizePool:
    pool: str
    nodes: int
    reason: str
    estimated_cost: Money
    kind: Literal["resize-pool"] = "resize-pool"


@dataclass(frozen=True)
class Dispatch:
    workload: str  # uid
    pool: str
    target: str
    reason: str
    estimated_cost: Money
    estimated_finish: datetime
    kind: Literal["dispatch"] = "dispatch"


@dataclass(frozen=True)
class CancelDispatch:
    workload: str
    pool: str
    reason: str
    estimated_cost: Money | None = None
    kind: Literal["cancel-dispatch"] = "cancel-dispatch"


@dataclass(frozen=True)
class DeletePool:
    pool: str
    reason: str
    estimated_cost: Money | None = None
    kind: Literal["delete-pool"] = "delete-pool"


Action = CreatePool | ResizePool | Dispatch | CancelDispatch | DeletePool


@dataclass(frozen=True)
class Skip:
    """A pending burstable workload that this plan does not burst, and why, in words."""

    workload: str
    namespace: str
    name: str
    reason: str
    estimated_cost: Money | None = None
    onprem_finish: datetime | None = None


EARLIEST = datetime.min.replace(tzinfo=UTC)  # a Plan's more_from for "at any time"


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    skips: tuple[Skip, ...] = ()
    # From when a plan may do more than this one on room freed alone, nothing else new: now, when
    # it left a workload that wants to burst waiting (refused, priced or not, or not looked at);
    # when a pool with work planned onto it passes its launch estimate (the work may be moved);
    # None: never. The simulator plans at a cloud job's end only from then.
    more_from: datetime | None = EARLIEST


# What NVIDIA GPU feature discovery puts in the `nvidia.com/gpu.product` node label for each
# catalog accelerator (the on-prem watch reads it back; simulated clouds write it).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRODUCTS: Mapping[str, str] = {
    "V100": "Tesla-V100-SXM2-16GB",
    "V100-32GB": "Tesla-V100-SXM2-32GB",
    "T4": "Tesla-T4",
    "P100": "Tesla-P100-PCIE-16GB",
    "P4": "Tesla-P4",
    "K80": "Tesla-K80",
    "M60": "Tesla-M60",
    "A100": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "A10G": "NVIDIA-A10G",
    "A10": "NVIDIA-A10",
    "L4": "NVIDIA-L4",
    "L40S": "NVIDIA-L40S",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "H100-MEGA": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "B200": "NVIDIA-B200",
    "B300": "NVIDIA-B300",
    "T4g": "NVIDIA-T4G",
}


# Tags (AWS, Azure) and labels (GCP) that burst puts on every pool.
TAG_OWNER = "burst.dev/owner"
TAG_POOL = "burst.dev/pool"
TAG_POLICY = "burst.dev/policy"
TAG_EPOCH = "burst.dev/epoch"
TAG_TOKEN = "burst.dev/token"  # noqa: S105 (a tag name: the idempotency token, no secret)
NODE_POOL_LABEL = "burst.dev/pool"

# GCP labels and Azure tags allow no `/` in keys, so there `burst.dev/owner` is written `burst-owner`;
# bills exported from those clouds carry the flat form too.
FLAT_TAG_OWNER = "burst-owner"
FLAT_TAG_POOL = "burst-pool"


def flat_tag_key(key: str) -> str:
    return key.replace("burst.dev/", "burst-")


def is_flat_burst_key(key: str) -> bool:
    return key.startswith("burst-")


def unflat_tag_key(key: str) -> str:
    """`burst-owner` back to `burst.dev/owner`; other keys as they are."""
    return f"burst.dev/{key.removeprefix('burst-')}" if is_flat_burst_key(key) else key


GPU_TAINT_KEY = "nvidia.com/gpu"

# Kueue's queue label: a Job carrying it is Kueue's to admit (kueue pkg/controller/constants).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach a cloud cluster's Kubernetes API with the cloud's own credentials: its
    endpoint, the CA that signs it, and a fresh bearer token with when it expires."""

    host: str
    ca_pem: bytes | None
    token: Callable[[], tuple[str, datetime]]

"""The admins' YAML documents: ServiceConfig, BurstPolicy and Budget, as strict pydantic models
(unknown keys are errors, camelCase in YAML, units in field names). load.py reads and cross-checks
them; every step receives the models from the composition root."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from burst.config.fields import (
    Amount,
    CapacityPolicy,
    Currency,
    Duration,
    Name,
    Percent,
    PositiveDuration,
    Provider,
)
from burst.model import Cloud

API_VERSION = "burst.dev/v1"
KINDS = ("ServiceConfig", "BurstPolicy", "Budget")
DEFAULT_DATABASE_URL = "sqlite:///burst.db"
# Requests for GPU slices (`nvidia.com/mig-1g.5gb`, `nvidia.com/gpu.shared`) as the watch names them.
SLICED = re.compile(r"mig-\d+g\.\d+gb|gpu\.shared")
# Typical time from asking for a GPU node pool to schedulable nodes (managed node group / node
# pool / agent pool creation plus GPU driver start-up); targets may set their own.
DEFAULT_PROVISIONING: Mapping[Cloud, timedelta] = {
    "aws": timedelta(minutes=10),
    "gcp": timedelta(minutes=8),
    "azure": timedelta(minutes=12),
}


class Strict(BaseModel):
    """Unknown keys are errors; YAML keys are the camelCase aliases of the fields."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
    )


class Metadata(Strict):
    name: Name
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


# --- ServiceConfig ------------------------------------------------------------------------------


class DatabaseSpec(Strict):
    """`url` without a password; the password, if any, comes from a mounted file."""

    url: str = DEFAULT_DATABASE_URL
    password_file: str | None = None

    @field_validator("url")
    @classmethod
    def _no_inline_password(cls, url: str) -> str:
        if urlsplit(url).password:
            raise ValueError(
                "the database URL must not contain a password: mount it as a file and set passwordFile"
            )
        return url


class KubernetesAccess(Strict):
    """How burst reaches a cluster's API: a kubeconfig (and context), in-cluster credentials, or
    (a cloud target's cluster) `fromCloud`: the endpoint, CA and tokens from the target's cloud
    SDK and credentials, with no exec plugin or cloud CLI in the image."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    from_cloud: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        if sum((self.in_cluster, bool(self.kubeconfig), self.from_cloud)) > 1:
            raise ValueError("set one of inCluster, kubeconfig and fromCloud")
        return self


class OnPremSpec(KubernetesAccess):
    """The on-prem cluster: how burst reaches it, and how it starts waiting workloads, which
    the on-prem estimate and the simulator follow. `StrictFIFO`, as Kueue's StrictFIFO
    ClusterQueues: in priority, then creation order, and nothing starts past an older workload
    that does not fit. `BestEffortFIFO`, as Kueue's default and the plain kube-scheduler: the
    same order, but a workload that fits starts past an older one that does not (Kueue
    docs/concepts/cluster_queue.md, "Queueing strategy"; the scheduler sets a pod that does not
    fit aside in its unschedulable queue and takes the next, pkg/scheduler/internal/queue/
    scheduling_queue.go). Set what the cluster does; unset, BestEffortFIFO, as Kueue's
    ClusterQueues and the plain scheduler start work unless told otherwise."""

    queueing: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"


class AwsCluster(Strict):
    """An EKS cluster; credentials from the AWS chain, optionally a named profile or a role."""

    cluster_name: str
    # CreateNodegroup requires both (botocore's EKS service model lists them as required).
    node_role_arn: str
    subnet_ids: list[str] = Field(min_length=1)
    profile: str | None = None  # a named profile; it may assume a role (role_arn in ~/.aws/config)
    ami_type: str | None = (
        None  # None: EKS's accelerated AL2023 AMI for the instance's architecture
    )

    @field_validator("node_role_arn")
    @classmethod
    def _role_arn(cls, arn: str) -> str:
        if not re.fullmatch(r"arn:aws[\w-]*:iam::\d{12}:role/.+", arn):
            raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
        return arn


class GcpCluster(Strict):
    """A GKE cluster; credentials from Application Default Credentials or a mounted key file."""

    project: str
    location: str
    cluster: str
    credentials_file: str | None = None


class AzureCluster(Strict):
    """An AKS cluster; credentials from azure-identity's DefaultAzureCredential chain."""

    subscription_id: str
    resource_group: str
    cluster: str
    managed_identity_client_id: str | None = None


class SimCluster(Strict):
    """A simulated cloud that prices and names its offers like `cloud`."""

    cloud: Cloud
    cluster: str = "remote"
    # Where the simulated cloud keeps its pools, to outlive the process as a real cloud's do.
    state_file: str | None = None
    # The cloud's own way into the cluster, where it adds and removes its nodes whether burst
    # can reach the cluster or not (a cloud's controllers do). Unset: burst's connection.
    kubeconfig: str | None = None


class TargetSpec(Strict):
    name: Name
    provider: Provider
    region: str
    aws: AwsCluster | None = None
    gcp: GcpCluster | None = None
    azure: AzureCluster | None = None
    sim: SimCluster | None = None
    kubernetes: KubernetesAccess = KubernetesAccess()
    remote_namespace: str = "{namespace}"
    # How long a new GPU pool takes to be ready here; the decision adds it to every estimate.
    # More than 0s: a launch times out at a multiple of it (app.py, launch_timeouts).
    provisioning_estimate: PositiveDuration | None = None
    # Expected interruptions per spot node-hour here, if known: the decision then prices a spot
    # run with its expected restarts (each from scratch), so long runs on many nodes stay off spot.
    spot_interruptions_per_hour: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_cluster_block(self) -> Self:
        blocks = {"aws": self.aws, "gcp": self.gcp, "azure": self.azure, "sim": self.sim}
        if blocks[self.provider] is None:
            raise ValueError(
                f"provider {self.provider} needs a '{self.provider}' block with its cluster"
            )
        extra = [k for k, v in blocks.items() if v is not None and k != self.provider]
        if extra:
            raise ValueError(f"provider is {self.provider}: remove the {', '.join(extra)} block")
        if self.kubernetes.from_cloud and self.provider == "sim":
            raise ValueError("kubernetes.fromCloud needs a cloud provider (aws, gcp or azure)")
        return self

    @property
    def provisioning(self) -> timedelta:
        if self.provisioning_estimate is None:
            return DEFAULT_PROVISIONING[self.cloud]
        return self.provisioning_estimate

    @property
    def cloud(self) -> Cloud:
        """Whose offers and prices this target uses (a simulated target borrows a real cloud's)."""
        if self.provider == "sim":
            assert self.sim is not None
            return self.sim.cloud
        return self.provider

    @property
    def account(self) -> str | None:
        """The cloud account its pools bill to, as the bills name it: the AWS account (from the
        node role's ARN, which EKS requires to be in the cluster's account), the GCP project, the
        Azure subscription; None for a simulated cloud."""
        if self.aws:
            return self.aws.node_role_arn.split(":")[4]
        if self.gcp:
            return self.gcp.project
        if self.azure:
            return self.azure.subscription_id
        return None


class Intervals(Strict):
    reconcile: Duration = timedelta(seconds=30)
    sync: Duration = timedelta(seconds=15)
    teardown: Duration = timedelta(minutes=1)
    meter: Duration = timedelta(minutes=1)
    orphan_gc: Duration = timedelta(minutes=10)
    price_refresh: Duration = timedelta(hours=6)


class Graces(Strict):
    # A remote cluster silent this long is lost: its workloads go back to the on-prem queue.
    remote_cluster: Duration = timedelta(minutes=10)
    # A pool in a cloud with this installation's tag and no row is deleted once seen this long.
    orphan_pool: Duration = timedelta(minutes=10)
    # How long burst may not act (a slow pass, a failover, the database away) while a copy under
    # a hard budget runs: that much of the run is reserved ahead (service/spend.py).
    budget_horizon: Duration = timedelta(minutes=10)


class ApiSpec(Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    token_file: str | None = None


class LeaderElection(Strict):
    namespace: str = "burst-system"
    lease_name: str = "burst-leader"
    lease_duration: Duration = timedelta(seconds=15)


class ExcludeRule(Strict):
    cloud: Cloud | None = None
    instance_type: str = "*"
    region: str = "*"


class PriceOverride(Strict):
    cloud: Cloud
    region: str
    instance_type: str
    capacity: Literal["on-demand", "spot"] = "on-demand"
    gpus: int | None = Field(default=None, ge=1)
    hourly_price_usd: Amount


class CatalogOverrides(Strict):
    """Negotiated discounts per cloud, explicit prices and excluded instance types."""

    discount_percent: dict[Cloud, Percent] = {}
    prices: list[PriceOverride] = []
    exclude: list[ExcludeRule] = []


class DatedRate(Strict):
    """A rate and the day it applies from: a report uses the rate of its period's start, so a
    rate added later never changes a past report."""

    rate: Amount
    since: date
    source: str | None = None  # where it came from, printed on the reports that use it


class ServiceSpec(Strict):
    installation_id: Name
    database: DatabaseSpec = DatabaseSpec()
    on_prem: OnPremSpec = OnPremSpec()
    label_prefix: str = "burst.dev/"
    team_label: str = "burst.dev/team"
    targets: list[TargetSpec] = []
    intervals: Intervals = Intervals()
    graces: Graces = Graces()
    api: ApiSpec = ApiSpec()
    leader_election: LeaderElection = LeaderElection()
    catalog: CatalogOverrides = CatalogOverrides()
    # Units of each currency per 1 USD (catalog prices are USD); needed for any policy or budget
    # that is not in USD. A rate, or a list of dated rates (see DatedRate).
    usd_exchange_rates: dict[Currency, Amount | list[DatedRate]] = {}
    # Budget periods and reports follow this IANA time zone's calendar (a month starts at local
    # midnight on its first day).
    time_zone: str = "UTC"

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, zone: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {zone!r} (an IANA name such as Europe/Zurich)"
            ) from None
        return zone

    def usd_rates(self, at: datetime | None = None) -> dict[str, Decimal]:
        """Units per USD of each currency on the day of `at` (the latest dated rate if None);
        a currency whose dated rates all start later has none then."""
        return {c: r.rate for c, r in self._rates(at).items()}

    def rate_notes(self, at: datetime | None = None) -> dict[str, str]:
        """Each rate used at `at` as a report prints it: `0.86 since 2026-11-01 (ECB)`."""
        return {
            c: f"{r.rate} since {r.since}" + (f" ({r.source})" if r.source else "")
            if r.source or r.since != date.min
            else str(r.rate)
            for c, r in self._rates(at).items()
        }

    def _rates(self, at: datetime | None) -> dict[str, DatedRate]:
        out = {}
        for currency, value in self.usd_exchange_rates.items():
            if not isinstance(value, list):
                out[currency] = DatedRate(rate=value, since=date.min)
                continue
            valid = [r for r in value if at is None or r.since <= at.date()]
            if valid:
                out[currency] = max(valid, key=lambda r: r.since)
        return out

    @model_validator(mode="after")
    def _unique_targets(self) -> Self:
        names = [t.name for t in self.targets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"target names must be unique: {', '.join(dup)}")
        return self


# --- BurstPolicy --------------------------------------------------------------------------------


class SelectorRequirement(Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class WorkloadSelector(Strict):
    """Which workloads a policy claims: namespaces (none listed = all) and Kubernetes label selectors."""

    namespaces: list[str] = []
    match_labels: dict[str, str] = {}
    match_expressions: list[SelectorRequirement] = []


class Trigger(Strict):
    deadline_safety_margin: Duration = timedelta(minutes=15)
    # A share of the workload's expected runtime added to the margin: an estimate is off in
    # proportion to the run (a p80 estimate of a run of hours misses by tens of minutes, one of
    # minutes by seconds). 0.25: a run of 4 h has an hour more.
    deadline_safety_share: float = Field(default=0.0, ge=0, le=10)
    # The share of the expected runtime the deadline trigger counts: 1 trusts the estimate; 0.5
    # bursts a workload for its deadline only when a run half as long would still miss it on-prem.
    # For guessed runtimes, as often twice too long as half too short, a deadline the guess alone
    # puts at risk is mostly met (the share nine runs in ten exceed). The margin is added too.
    deadline_runtime_share: float = Field(default=1.0, gt=0, le=1)
    max_pending_wait: Duration | None = None
    quota_exhausted: bool = False
    # What finishing an hour sooner is worth per GPU, in the policy's currency: a workload that
    # no other trigger sends bursts when a cloud would finish it sooner than on-prem and the
    # hours saved x its GPUs x this price pay for the cloud run. None: only the triggers above.
    wait_price: Amount | None = None
    # How long a workload still queued on-prem may wait for each GPU-hour it will run (its GPUs x
    # expected runtime) before it bursts: Starburst's compute-wait, k x GPUs x runtime. 1m: a
    # 1-GPU run of an hour waits a minute, an 8-GPU run of 10 h 80 minutes. None: not used.
    wait_per_gpu_hour: Duration | None = None


class Placement(Strict):
    targets: list[str] = Field(min_length=1)
    # Requested GPU -> GPUs it may run on instead; a GPU not listed runs only on itself.
    accelerators: dict[str, list[str]] = {}
    capacity: CapacityPolicy = "on-demand"
    # Spot only for runs that spot interruptions are expected to delay by at most this (each one
    # restarts the run from scratch; a target's spotInterruptionsPerHour sets how often). None:
    # any run the capacity policy allows.
    max_spot_delay: Duration | None = None
    share_pools: bool = False  # take the room of other sharing policies' pools (decide/sharing.py)


class Limits(Strict):
    currency: Currency = "USD"
    max_hourly_price: Amount | None = None
    max_nodes_per_pool: int = Field(default=8, ge=1)
    max_pools: int = Field(default=4, ge=1)
    max_cost_per_job: Amount | None = None


class TeardownSpec(Strict):
    # How long a pool running nothing is kept. `next-arrival`: at most that, and deleted once no
    # work for it is expected before a new pool could be up (decide/existing.py, expected_gap).
    idle_ttl: Duration = timedelta(minutes=10)
    idle_ttl_choice: Literal["fixed", "next-arrival"] = "fixed"
    # Past it a pool goes once idle, taking no new work but, at maxPools, runs ending before its own.
    max_lifetime: Duration = timedelta(hours=24)


class Replication(Strict):
    image_registries: list[str] = Field(min_length=1)
    secrets: list[str] = []
    config_maps: list[str] = []
    allow_service_account_token: bool = False


class PolicyDefaults(Strict):
    expected_runtime: Duration = timedelta(hours=4)


class PolicySpec(Strict):
    team: str | None = None
    selector: WorkloadSelector = WorkloadSelector()
    trigger: Trigger = Trigger()
    placement: Placement
    limits: Limits = Limits()
    teardown: TeardownSpec = TeardownSpec()
    replication: Replication
    defaults: PolicyDefaults = PolicyDefaults()


# --- Budget -------------------------------------------------------------------------------------


class BudgetScope(Strict):
    team: str | None = None
    policy: str | None = None
    namespace: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if sum(v is not None for v in (self.team, self.policy, self.namespace)) != 1:
            raise ValueError("a budget scope names exactly one of team, policy or namespace")
        return self


class BudgetSpec(Strict):
    scope: BudgetScope
    period: Literal["month", "week", "day"]
    amount: Amount
    currency: Currency
    enforcement: Literal["hard", "soft"] = "hard"
    alert_thresholds_percent: list[Annotated[int, Field(ge=1, le=1000)]] = [50, 80, 100]


# --- documents ----------------------------------------------------------------------------------


class BurstDocument(Strict):
    api_version: Literal["burst.dev/v1"]
    metadata: Metadata


class ServiceConfig(BurstDocument):
    kind: Literal["ServiceConfig"]
    spec: ServiceSpec


class BurstPolicy(BurstDocument):
    kind: Literal["BurstPolicy"]
    spec: PolicySpec


class Budget(BurstDocument):
    kind: Literal["Budget"]
    spec: BudgetSpec


MODELS: Mapping[str, type[BurstDocument]] = {
    "ServiceConfig": ServiceConfig,
    "BurstPolicy": BurstPolicy,
    "Budget": Budget,
}

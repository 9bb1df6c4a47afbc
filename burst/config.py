"""The admins' YAML documents: ServiceConfig, BurstPolicy and Budget, as strict pydantic models.

This is the bottom of the flow: app.py loads the documents once and hands the models to every step.
`load()` reads files or folders of Kubernetes-style documents (`apiVersion: burst.dev/v1`, `kind`,
`metadata`, `spec`) and either returns a Config or raises ConfigError with every problem found, each
naming its file, line, column and field. Checks that need the price catalog (known regions and
accelerators) take a Vocabulary, so this module does not depend on the catalog.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from burst.duration import parse_duration
from burst.model import Cloud
from burst.money import check_currency, to_micros
from burst.yamlsource import Document, Position, YamlSyntaxError, load_documents
from burst.yamlsource import Path as DocPath

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

# --- field types --------------------------------------------------------------------------------


def _duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError("a duration is text such as 90s, 10m, 1h30m, 2d")
    return parse_duration(value)


def _amount(value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
        raise ValueError("an amount is a decimal number such as 12.40")
    micros = to_micros(value)
    if micros < 0:
        raise ValueError("an amount cannot be negative")
    return Decimal(micros) / 1_000_000


_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _name(value: str) -> str:
    if len(value) > 63 or not _NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: lower-case letters, digits and '-', at most 63 characters"
        )
    return value


Duration = Annotated[timedelta, PlainValidator(_duration)]
Amount = Annotated[Decimal, PlainValidator(_amount)]
Currency = Annotated[str, AfterValidator(check_currency)]
Name = Annotated[str, AfterValidator(_name)]
Percent = Annotated[Decimal, Field(ge=0, le=100)]
Provider = Literal["aws", "gcp", "azure", "sim"]
CapacityPolicy = Literal["on-demand", "spot", "spot-if-slack"]


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
    """How burst reaches a cluster's API: a kubeconfig (and context), or in-cluster credentials."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        if self.in_cluster and self.kubeconfig:
            raise ValueError("set either inCluster or kubeconfig, not both")
        return self


class AwsCluster(Strict):
    """An EKS cluster; credentials from the AWS chain, optionally a named profile or a role."""

    cluster_name: str
    node_role_arn: str | None = None
    subnet_ids: list[str] = []
    profile: str | None = None  # a named profile; it may assume a role (role_arn in ~/.aws/config)
    ami_type: str = "AL2023_x86_64_NVIDIA"


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
    provisioning_estimate: Duration | None = None
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
        return self

    @property
    def provisioning(self) -> timedelta:
        return self.provisioning_estimate or DEFAULT_PROVISIONING[self.cloud]

    @property
    def cloud(self) -> Cloud:
        """Whose offers and prices this target uses (a simulated target borrows a real cloud's)."""
        if self.provider == "sim":
            assert self.sim is not None
            return self.sim.cloud
        return self.provider


class Intervals(Strict):
    reconcile: Duration = timedelta(seconds=30)
    sync: Duration = timedelta(seconds=15)
    teardown: Duration = timedelta(minutes=1)
    meter: Duration = timedelta(minutes=1)
    orphan_gc: Duration = timedelta(minutes=10)
    price_refresh: Duration = timedelta(hours=6)


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


class ServiceSpec(Strict):
    installation_id: Name
    database: DatabaseSpec = DatabaseSpec()
    on_prem: KubernetesAccess = KubernetesAccess()
    label_prefix: str = "burst.dev/"
    team_label: str = "burst.dev/team"
    targets: list[TargetSpec] = []
    intervals: Intervals = Intervals()
    api: ApiSpec = ApiSpec()
    leader_election: LeaderElection = LeaderElection()
    catalog: CatalogOverrides = CatalogOverrides()
    # Units of each currency per 1 USD (catalog prices are USD); needed for any policy or budget
    # that is not in USD.
    usd_exchange_rates: dict[Currency, Amount] = {}

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
    max_pending_wait: Duration | None = None
    quota_exhausted: bool = False


class Placement(Strict):
    targets: list[str] = Field(min_length=1)
    # Requested GPU -> GPUs it may run on instead; a GPU not listed runs only on itself.
    accelerators: dict[str, list[str]] = {}
    capacity: CapacityPolicy = "on-demand"


class Limits(Strict):
    currency: Currency = "USD"
    max_hourly_price: Amount | None = None
    max_nodes_per_pool: int = Field(default=8, ge=1)
    max_pools: int = Field(default=4, ge=1)
    max_cost_per_job: Amount | None = None


class TeardownSpec(Strict):
    idle_ttl: Duration = timedelta(minutes=10)
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


class _Doc(Strict):
    api_version: Literal["burst.dev/v1"]
    metadata: Metadata


class ServiceConfig(_Doc):
    kind: Literal["ServiceConfig"]
    spec: ServiceSpec


class BurstPolicy(_Doc):
    kind: Literal["BurstPolicy"]
    spec: PolicySpec


class Budget(_Doc):
    kind: Literal["Budget"]
    spec: BudgetSpec


_MODELS: Mapping[str, type[_Doc]] = {
    "ServiceConfig": ServiceConfig,
    "BurstPolicy": BurstPolicy,
    "Budget": Budget,
}


@dataclass(frozen=True, slots=True)
class Problem:
    position: Position
    path: str
    message: str

    def __str__(self) -> str:
        return (
            f"{self.position}: {self.path}: {self.message}"
            if self.path
            else (f"{self.position}: {self.message}")
        )


class ConfigError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems


@dataclass(frozen=True)
class Vocabulary:
    """What exists in the price catalog, for reference checks: regions per cloud, accelerator names."""

    regions: Mapping[Cloud, frozenset[str]]
    accelerators: frozenset[str]


@dataclass
class Config:
    service: ServiceConfig | None = None
    policies: dict[str, BurstPolicy] = field(default_factory=dict)
    budgets: dict[str, Budget] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


def _dotted(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(err: Mapping[str, Any]) -> str:
    if err["type"] == "value_error":
        return str(err["ctx"]["error"])
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    return str(err["msg"])


def _validation_problems(doc: Document, exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        position = doc.position(loc, key=err["type"] == "extra_forbidden")
        problems.append(Problem(position, _dotted(loc), _message(err)))
    return problems


@dataclass
class _Parsed:
    doc: Document
    model: _Doc


def _files(paths: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(
                f for f in p.rglob("*") if f.suffix in (".yaml", ".yml") and f.is_file()
            )
        else:
            found.append(p)
    return found


def _parse(doc: Document) -> _Doc | list[Problem] | None:
    """A burst document, its problems, or None for a document of another API (a Kubernetes
    manifest or a kustomization kept beside the configuration)."""
    data = doc.data
    if (
        isinstance(data, dict)
        and isinstance(data.get("apiVersion"), str)
        and not str(data["apiVersion"]).startswith("burst.dev/")
    ):
        return None
    if not isinstance(data, dict):
        return [
            Problem(
                doc.start, "", "a document must be a mapping with apiVersion, kind, metadata, spec"
            )
        ]
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in _MODELS:
        where = doc.position(("kind",)) if "kind" in data else doc.start
        return [
            Problem(where, "kind", f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
        ]
    try:
        return _MODELS[kind].model_validate(data)
    except ValidationError as exc:
        return _validation_problems(doc, exc)


def load(paths: Iterable[str | Path], vocabulary: Vocabulary | None = None) -> Config:
    """Load and check every document under `paths`; raises ConfigError listing all problems."""
    problems: list[Problem] = []
    parsed: list[_Parsed] = []
    files = _files(paths)
    for file in files:
        name = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(
                Problem(Position(name, 1, 1), "", f"cannot read: {exc.__class__.__name__}: {exc}")
            )
            continue
        try:
            docs = list(load_documents(text, name))
        except YamlSyntaxError as exc:
            problems.append(Problem(exc.position, "", exc.message))
            continue
        for doc in docs:
            result = _parse(doc)
            if result is None:
                continue
            if isinstance(result, list):
                problems += result
            else:
                parsed.append(_Parsed(doc, result))
    config = Config(files=[str(f) for f in files])
    problems += _collect(config, parsed)
    problems += _check_references(config, parsed, vocabulary)
    if problems:
        raise ConfigError(
            sorted(problems, key=lambda p: (p.position.file, p.position.line, p.position.column))
        )
    return config


def _collect(config: Config, parsed: list[_Parsed]) -> list[Problem]:
    problems = []
    for p in parsed:
        name = p.model.metadata.name
        where = p.doc.position(("metadata", "name"))
        if isinstance(p.model, ServiceConfig):
            if config.service is not None:
                problems.append(Problem(where, "kind", "only one ServiceConfig may be given"))
            config.service = p.model
        elif isinstance(p.model, BurstPolicy | Budget):
            table: dict[str, Any] = (
                config.policies if isinstance(p.model, BurstPolicy) else config.budgets
            )
            if name in table:
                problems.append(
                    Problem(where, "metadata.name", f"duplicate {p.model.kind} {name!r}")
                )
            table[name] = p.model
    return problems


def _check_references(
    config: Config, parsed: list[_Parsed], vocabulary: Vocabulary | None
) -> list[Problem]:
    problems: list[Problem] = []

    def report(p: _Parsed, path: DocPath, message: str) -> None:
        problems.append(Problem(p.doc.position(path), _dotted(path), message))

    service = config.service
    targets = {t.name: t for t in service.spec.targets} if service else {}
    rates = service.spec.usd_exchange_rates if service else {}
    policies = [p for p in parsed if isinstance(p.model, BurstPolicy)]
    for p in parsed:
        m = p.model
        if isinstance(m, ServiceConfig) and vocabulary is not None:
            for i, t in enumerate(m.spec.targets):
                known = vocabulary.regions.get(t.cloud, frozenset())
                if t.region not in known:
                    report(
                        p,
                        ("spec", "targets", i, "region"),
                        f"unknown {t.cloud} region {t.region!r}; known: {', '.join(sorted(known))}",
                    )
        elif isinstance(m, BurstPolicy):
            if service is not None:
                for i, name in enumerate(m.spec.placement.targets):
                    if name not in targets:
                        report(
                            p,
                            ("spec", "placement", "targets", i),
                            f"no target {name!r} in the ServiceConfig",
                        )
            if vocabulary is not None:
                for want, subs in m.spec.placement.accelerators.items():
                    for j, acc in [(None, want), *enumerate(subs)]:
                        # A request may also be a MIG slice or a time-sliced GPU, mapped to cloud GPUs.
                        if acc not in vocabulary.accelerators and not (
                            j is None and SLICED.fullmatch(acc)
                        ):
                            path: DocPath = ("spec", "placement", "accelerators", want)
                            report(
                                p,
                                path if j is None else (*path, j),
                                f"unknown accelerator {acc!r}; known: "
                                f"{', '.join(sorted(vocabulary.accelerators))}",
                            )
            _check_currency_rate(
                p, ("spec", "limits", "currency"), m.spec.limits.currency, service, rates, report
            )
        elif isinstance(m, Budget):
            if m.spec.scope.policy is not None and m.spec.scope.policy not in config.policies:
                report(p, ("spec", "scope", "policy"), f"no BurstPolicy {m.spec.scope.policy!r}")
            _check_currency_rate(p, ("spec", "currency"), m.spec.currency, service, rates, report)
    for i, a in enumerate(policies):
        for b in policies[i + 1 :]:
            assert isinstance(a.model, BurstPolicy) and isinstance(b.model, BurstPolicy)
            if selectors_overlap(a.model.spec.selector, b.model.spec.selector):
                report(
                    b,
                    ("spec", "selector"),
                    f"overlaps BurstPolicy {a.model.metadata.name!r} ({a.doc.start.file}:"
                    f"{a.doc.start.line}): a workload could match both; narrow one selector",
                )
    return problems


def _check_currency_rate(
    p: _Parsed,
    path: DocPath,
    currency: str,
    service: ServiceConfig | None,
    rates: Mapping[str, Decimal],
    report: Any,
) -> None:
    if service is not None and currency != "USD" and currency not in rates:
        report(p, path, f"prices are in USD: add usdExchangeRates.{currency} to the ServiceConfig")


def _labels_satisfiable(reqs: Iterable[tuple[str, str, frozenset[str]]]) -> bool:
    """Whether some label set satisfies every (key, operator, values) requirement at once."""
    by_key: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for key, op, values in reqs:
        by_key.setdefault(key, []).append((op, values))
    for constraints in by_key.values():
        must_exist = any(op in ("In", "Exists") for op, _ in constraints)
        must_not = any(op == "DoesNotExist" for op, _ in constraints)
        if must_exist and must_not:
            return False
        allowed: frozenset[str] | None = None
        for op, values in constraints:
            if op == "In":
                allowed = values if allowed is None else allowed & values
        if allowed is not None:
            banned = frozenset().union(*(v for op, v in constraints if op == "NotIn"))
            if not allowed - banned:
                return False
    return True


def _requirements(s: WorkloadSelector) -> list[tuple[str, str, frozenset[str]]]:
    reqs = [(k, "In", frozenset([v])) for k, v in s.match_labels.items()]
    reqs += [(r.key, r.operator, frozenset(r.values)) for r in s.match_expressions]
    return reqs


def selector_matches(s: WorkloadSelector, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether a workload in `namespace` with `labels` is claimed by the selector."""
    if s.namespaces and namespace not in s.namespaces:
        return False
    if s.match_labels and any(labels.get(k) != v for k, v in s.match_labels.items()):
        return False
    for r in s.match_expressions:
        value = labels.get(r.key)
        ok = {
            "In": value is not None and value in r.values,
            "NotIn": value is None or value not in r.values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[r.operator]
        if not ok:
            return False
    return True


def selectors_overlap(a: WorkloadSelector, b: WorkloadSelector) -> bool:
    """True when one workload could be claimed by both selectors."""
    if a.namespaces and b.namespaces and not set(a.namespaces) & set(b.namespaces):
        return False
    return _labels_satisfiable(_requirements(a) + _requirements(b))

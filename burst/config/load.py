"""Read the admins' YAML into a Config, or fail with every problem at once.

`load()` reads files or folders of Kubernetes-style documents (`apiVersion: burst.dev/v1`, `kind`,
`metadata`, `spec`) and either returns a Config or raises ConfigError with every problem found, each
naming its file, line, column and field. Checks that need the price catalog (known regions and
accelerators) take a Vocabulary, so the configuration does not depend on the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from burst.config.documents import (
    API_VERSION,
    KINDS,
    MODELS,
    SLICED,
    Budget,
    BurstDocument,
    BurstPolicy,
    ServiceConfig,
)
from burst.config.selectors import selectors_overlap
from burst.config.yamlsource import Document, Position, YamlSyntaxError, load_documents, read
from burst.config.yamlsource import Path as DocPath
from burst.durations import format_duration
from burst.model import Cloud


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
    model: BurstDocument


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


def _parse(doc: Document) -> BurstDocument | list[Problem] | None:
    """A burst document, its problems, or None for a document of another API (a Kubernetes
    manifest or a kustomization kept beside the configuration)."""
    data = doc.data
    if isinstance(data, dict) and isinstance(data.get("apiVersion"), str):
        version = str(data["apiVersion"])
        ours = data.get("kind") in MODELS or "burst" in version.split("/")[0]
        if version != API_VERSION and ours:
            # A typo here would drop a policy or a budget without a word: say so instead.
            return [
                Problem(
                    doc.position(("apiVersion",)),
                    "apiVersion",
                    f"unknown apiVersion {version!r}: this burst reads {API_VERSION}",
                )
            ]
        if not ours:
            return None
    if not isinstance(data, dict):
        return [
            Problem(
                doc.start, "", "a document must be a mapping with apiVersion, kind, metadata, spec"
            )
        ]
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in MODELS:
        where = doc.position(("kind",)) if "kind" in data else doc.start
        return [
            Problem(where, "kind", f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
        ]
    try:
        return MODELS[kind].model_validate(data)
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
            docs = list(load_documents(read(file), name))
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
    rates = service.spec.usd_exchange_rates if service else {}  # names only: any date
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
        if isinstance(m, ServiceConfig):
            for i, t in enumerate(m.spec.targets):
                # A GKE cluster's location is its region or one of its zones; pools go where it is.
                where = t.gcp.location if t.gcp else t.region
                if where != t.region and not where.startswith(f"{t.region}-"):
                    report(
                        p,
                        ("spec", "targets", i, "gcp", "location"),
                        f"cluster location {where!r} is not in the target's region {t.region!r}",
                    )
        elif isinstance(m, BurstPolicy):
            spec = m.spec
            if spec.teardown.max_lifetime < spec.defaults.expected_runtime:
                report(
                    p,
                    ("spec", "teardown", "maxLifetime"),
                    f"shorter than spec.defaults.expectedRuntime "
                    f"({format_duration(spec.defaults.expected_runtime)}): a job of the default "
                    "length would lose its pool before it ends",
                )
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
    rates: Mapping[str, object],
    report: Any,
) -> None:
    if service is not None and currency != "USD" and currency not in rates:
        report(p, path, f"prices are in USD: add usdExchangeRates.{currency} to the ServiceConfig")

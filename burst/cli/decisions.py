"""`burst plan` and `burst explain`: the decision, shown. `plan` runs it on a snapshot of the queue;
`explain` says whether one manifest may burst, under which policy, what its copy would be, or why not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from burst.cli.options import ConfigOption, console_width, fail, load_config, require_config

if TYPE_CHECKING:
    from burst.config import BurstPolicy, Config
    from burst.kube.annotations import BurstAnnotations


def plan_cmd(
    snapshot: Annotated[
        Path, typer.Option("--snapshot", "-s", help="Snapshot JSON (docs/snapshot.schema.json).")
    ],
    config_path: ConfigOption = None,
    now: Annotated[
        str | None,
        typer.Option(
            help="Plan at this RFC 3339 time (default: the snapshot's taken_at, else now)."
        ),
    ] = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f")] = "text",
) -> None:
    """Print the plan decide.plan() makes for a snapshot: actions and skips, each with its reason."""
    from datetime import datetime

    from burst import decide
    from burst.clock import SystemClock
    from burst.cloud import catalog
    from burst.decide.snapshot import SnapshotError, load_snapshot, plan_document

    cfg = require_config(config_path, "plan")
    try:
        snap = load_snapshot(snapshot.read_bytes())
    except OSError as exc:
        raise fail(f"cannot read {snapshot}: {exc.strerror}") from None
    except SnapshotError as exc:
        raise fail(f"{snapshot}: invalid snapshot:\n{exc}") from None
    try:
        at = datetime.fromisoformat(now) if now else (snap.taken_at or SystemClock().now())
    except ValueError:
        raise fail(f"--now {now!r} is not an RFC 3339 time") from None
    if at.tzinfo is None:
        raise fail("--now needs a time zone, e.g. 2026-11-30T09:00:00Z")
    offers = catalog.shipped()
    if cfg.service is not None:
        offers = offers.with_overrides(cfg.service.spec.catalog)
    try:
        result = decide.plan(snap, offers, cfg, at)
    except decide.PlanError as exc:
        raise fail(str(exc)) from None
    if fmt == "json":
        typer.echo(json.dumps(plan_document(result), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=console_width())
    names = {w.uid: f"{w.namespace}/{w.name}" for w in snap.workloads}
    actions = Table(title=f"Plan at {at:%Y-%m-%d %H:%M %Z}: {len(result.actions)} actions")
    for column in ("action", "workload / pool", "where", "est. cost", "reason"):
        actions.add_column(column, overflow="fold")
    for a in result.actions:
        subject = names.get(getattr(a, "workload", ""), a.pool)
        where = a.pool if subject != a.pool else getattr(a, "target", "")
        cost = str(a.estimated_cost) if a.estimated_cost else ""
        actions.add_row(a.kind, subject, where, cost, a.reason)
    console.print(actions)
    skips = Table(title=f"{len(result.skips)} pending burstable workloads not burst")
    for column in ("workload", "reason"):
        skips.add_column(column, overflow="fold")
    for s in result.skips:
        skips.add_row(f"{s.namespace}/{s.name}", s.reason)
    console.print(skips)


def _plan_alone(
    obj: dict[str, Any], cfg: Config, policy: BurstPolicy, said: BurstAnnotations
) -> tuple[dict[str, str] | None, str | None]:
    """What the decision does with this workload alone, now, with on-prem full: (where and for how
    much it would burst, or None; the plan's reason if it would not). The same checks as the
    service: the plan's own."""
    from burst import decide
    from burst.clock import SystemClock
    from burst.cloud import catalog
    from burst.durations import format_duration
    from burst.kube.shapes import workload_shape
    from burst.model import DEFAULT_RUNTIME_SOURCE, Dispatch, Snapshot, Workload

    shaped = workload_shape(obj)
    if shaped is None or cfg.service is None:
        return None, "it asks for no GPU"
    shape, pods = shaped
    meta = obj.get("metadata") or {}
    now = SystemClock().now()
    workload = Workload(
        uid="explain",
        kind=obj.get("kind", "Job"),
        namespace=meta.get("namespace") or "default",
        name=meta.get("name", "?"),
        team=meta.get("namespace") or "default",
        gpus_per_pod=shape.gpus,
        pods=pods,
        created=now,
        pending_since=now,
        accelerator=shape.accelerator,
        burstable=True,
        labels=meta.get("labels") or {},
        deadline=said.deadline,
        expected_runtime=said.expected_runtime,
        max_cost=said.max_cost,
        cpu_per_pod=shape.cpu,
        memory_gib_per_pod=shape.memory_gib,
    )
    offers = catalog.shipped().with_overrides(cfg.service.spec.catalog)
    plan = decide.plan(Snapshot(workloads=(workload,)), offers, cfg, now)
    sent = next((a for a in plan.actions if isinstance(a, Dispatch)), None)
    if sent is None:
        skip = next((k.reason for k in plan.skips if k.workload == "explain"), None)
        return None, skip or "the plan does not send it"
    where = sent.reason.split("; ")[1].split(", est.")[0]
    used = said.expected_runtime or policy.spec.defaults.expected_runtime
    return {
        "cost": str(sent.estimated_cost),
        "where": where,
        "runtime": format_duration(used),
        # `burst explain` reads a manifest, not the cluster's history: the service's API shows
        # the estimates it learned
        "runtime_source": "declared" if said.expected_runtime else DEFAULT_RUNTIME_SOURCE,
    }, None


def explain(
    manifest: Annotated[Path, typer.Argument(help="A Job or PyTorchJob manifest (YAML).")],
    config_path: ConfigOption = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f")] = "text",
) -> None:
    """Say whether a workload may burst, under which policy, what its remote copy would be, or why not."""
    import yaml

    from burst.clock import SystemClock
    from burst.config import Replication, selector_matches
    from burst.config.yamlsource import YamlSyntaxError, load_documents, read
    from burst.kube.annotations import read_annotations
    from burst.kube.shapes import request_problems
    from burst.kube.translate import translate

    try:  # size and alias limits as for configuration files
        docs = [d.data for d in load_documents(read(manifest), str(manifest)) if d.data]
    except YamlSyntaxError as exc:
        raise fail(f"{exc.position}: {exc.message}") from None
    if not docs or not isinstance(docs[0], dict):
        raise fail(f"{manifest}: no Kubernetes object in it")
    obj = docs[0]
    cfg = load_config(config_path) if config_path else None
    prefix = cfg.service.spec.label_prefix if cfg and cfg.service else "burst.dev/"
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    reasons: list[str] = []
    if obj.get("kind") == "Pod":
        reasons.append("a bare Pod is not burstable: wrap it in a Job")
    if labels.get(f"{prefix}burstable") != "true":
        reasons.append(f'not labelled {prefix}burstable: "true"')
    policy = None
    if cfg is not None:
        policy = next(
            (
                p
                for name, p in sorted(cfg.policies.items())
                if selector_matches(p.spec.selector, namespace, labels)
            ),
            None,
        )
    if policy is None:
        reasons.append(
            f"no BurstPolicy claims namespace {namespace} with these labels"
            + ("" if cfg else " (no --config given)")
        )
    rules = (
        policy.spec.replication
        if policy
        else Replication.model_construct(
            image_registries=[], secrets=[], config_maps=[], allow_service_account_token=False
        )
    )
    remote_namespace = namespace
    if policy and cfg and cfg.service:
        first = next(
            (t for t in cfg.service.spec.targets if t.name in policy.spec.placement.targets), None
        )
        if first is not None:
            remote_namespace = first.remote_namespace.format(namespace=namespace)
    obj.setdefault("metadata", {}).setdefault("uid", "00000000-0000-0000-0000-000000000000")
    translated = translate(
        obj,
        pool="<pool>",
        remote_namespace=remote_namespace,
        installation=cfg.service.spec.installation_id if cfg and cfg.service else "<installation>",
        rules=rules,
    )
    reasons += request_problems(obj) + translated.refusals
    currency = policy.spec.limits.currency if policy else "USD"
    said, warnings = read_annotations(
        meta.get("annotations") or {}, prefix, SystemClock().now(), currency
    )
    warnings += [f"the copy leaves out {note}" for note in translated.stripped]
    estimate = None
    if not reasons and cfg is not None and policy:
        estimate, refusal = _plan_alone(obj, cfg, policy, said)
        reasons += [refusal] if refusal else []
    result = {
        "burstable": not reasons,
        "policy": policy.metadata.name if policy else None,
        "reasons": reasons,
        "warnings": warnings,
        "estimate": estimate,
        "remote": translated.remote if obj.get("kind") != "Pod" else None,
    }
    if fmt == "json":
        typer.echo(json.dumps(result, indent=2))
        return
    name = f"{obj.get('kind')} {namespace}/{meta.get('name', '?')}"
    for warning in warnings:
        typer.echo(f"warning: {warning}")
    if not reasons:
        typer.echo(f"{name} may burst under policy {result['policy']}.")
        if estimate is not None:
            typer.echo(
                f"If it burst now: {estimate['where']}, estimated cost {estimate['cost']} "
                f"(provisioning, {estimate['runtime']} of runtime ({estimate['runtime_source']}) "
                f"and the idle tail)."
            )
        typer.echo("Its remote copy would be:")
        typer.echo(yaml.safe_dump(translated.remote, sort_keys=False).rstrip())
        return
    typer.echo(f"{name} would not burst:")
    for reason in reasons:
        typer.echo(f"  - {reason}")

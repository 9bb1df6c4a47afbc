"""The `burst` command line: the top of the flow, where people meet it.

Each command imports what it needs inside its body, so `burst --help` stays fast and cloud SDKs
and the kubernetes client load only for the commands that use them.
"""

from __future__ import annotations

import contextlib
import json
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import typer

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from burst.config import BurstPolicy, Config
    from burst.model import Cloud

app = typer.Typer(
    name="burst",
    help="Burst pending GPU workloads from an on-prem Kubernetes cluster to cloud GPU node pools.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Check the YAML configuration documents.", no_args_is_help=True)
db_app = typer.Typer(help="Create and check the database schema.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(db_app, name="db")
sandbox_app = typer.Typer(
    help="A local Kubernetes API server with simulated GPU nodes.", no_args_is_help=True
)
app.add_typer(sandbox_app, name="sandbox")

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Folder or file of configuration documents."),
]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _load_config(paths: list[Path]) -> Config:
    """Load configuration with the catalog's vocabulary; print every problem and exit 1 if any."""
    from burst import catalog, config

    shipped = catalog.shipped()
    vocabulary = config.Vocabulary(shipped.regions(), shipped.accelerators())
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise _fail(f"no such file or folder: {', '.join(missing)}")
    try:
        return config.load(paths, vocabulary)
    except config.ConfigError as exc:
        for problem in exc.problems:
            typer.echo(str(problem))
        raise typer.Exit(1) from None


@config_app.command("validate")
def config_validate(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders of YAML documents.")],
) -> None:
    """Validate documents: exit 0 when valid, else one `FILE:LINE:COLUMN: field: message` per problem."""
    cfg = _load_config(paths)
    counts = {
        "ServiceConfig": int(cfg.service is not None),
        "BurstPolicy": len(cfg.policies),
        "Budget": len(cfg.budgets),
    }
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    typer.echo(f"ok: {len(cfg.files)} file(s), {summary or 'no documents'}")
    if cfg.service is None and cfg.policies:
        typer.echo("note: no ServiceConfig given, so policy targets were not checked", err=True)


@app.command("catalog")
def catalog_cmd(
    accelerator: Annotated[
        list[str] | None,
        typer.Option("--accelerator", "-a", help="GPU model, e.g. V100; repeatable."),
    ] = None,
    provider: Annotated[
        list[str] | None, typer.Option("--provider", "-p", help="aws, gcp or azure; repeatable.")
    ] = None,
    region: Annotated[list[str] | None, typer.Option("--region", "-r", help="Repeatable.")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per node.")] = None,
    capacity: Annotated[Literal["on-demand", "spot"] | None, typer.Option()] = None,
    config_path: ConfigOption = None,
    limit: Annotated[int, typer.Option(help="Show at most this many offers (0 = all).")] = 20,
    fmt: Annotated[Literal["table", "json", "csv"], typer.Option("--format")] = "table",
) -> None:
    """List offers from the price catalog, cheapest first, with the config's overrides applied."""
    from burst import catalog

    offers_catalog = catalog.shipped()
    if config_path is not None:
        cfg = _load_config([config_path])
        if cfg.service is not None:
            offers_catalog = offers_catalog.with_overrides(cfg.service.spec.catalog)
    known = offers_catalog.accelerators()
    unknown = sorted(set(accelerator or []) - known)
    if unknown:
        raise _fail(f"unknown accelerator {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    bad_clouds = sorted(set(provider or []) - {"aws", "gcp", "azure"})
    if bad_clouds:
        raise _fail(f"unknown provider {', '.join(bad_clouds)}; known: aws, gcp, azure")
    regions = offers_catalog.regions()
    wanted_regions = None
    if region:
        wanted_regions = {(c, r) for c, rs in regions.items() for r in rs if r in region}
    offers = offers_catalog.query(
        accelerator or sorted(known),
        gpus=gpus,
        capacity=capacity or ("on-demand", "spot"),
        clouds=cast("list[Cloud]", provider) if provider else None,
        regions=wanted_regions,
    )
    shown = offers[:limit] if limit else offers
    rows = [
        {
            "cloud": o.cloud,
            "region": o.region,
            "instance_type": o.instance_type,
            "accelerator": o.accelerator,
            "gpus": o.gpus,
            "vcpus": o.vcpus,
            "memory_gib": o.memory_gib,
            "capacity": o.capacity,
            "hourly": str(o.hourly.to_decimal()),
            "per_gpu_hour": str(o.hourly.to_decimal() / o.gpus),
            "currency": o.hourly.currency,
            "price_source": o.price_source,
        }
        for o in shown
    ]
    if fmt == "json":
        typer.echo(json.dumps({"offers": rows, "total": len(offers)}, indent=2))
        return
    if fmt == "csv":
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["cloud"])
        writer.writeheader()
        writer.writerows(rows)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(shown)} of {len(offers)} offers, cheapest first (USD per node-hour)")
    for column in (
        "cloud",
        "region",
        "instance type",
        "GPU",
        "vCPU",
        "GiB",
        "capacity",
        "per hour",
        "per GPU-hour",
        "source",
    ):
        table.add_column(
            column,
            justify="right" if column in ("vCPU", "GiB", "per hour", "per GPU-hour") else "left",
        )
    for o in shown:
        table.add_row(
            o.cloud,
            o.region,
            o.instance_type,
            f"{o.gpus}x {o.accelerator}",
            f"{o.vcpus:g}",
            f"{o.memory_gib:g}",
            o.capacity,
            f"{o.hourly.to_decimal():.4f}",
            f"{o.hourly.to_decimal() / o.gpus:.4f}",
            o.price_source,
        )
    # Piped output has no terminal width to fit; keep rows whole rather than wrap them.
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@app.command("plan")
def plan_cmd(
    snapshot: Annotated[
        Path, typer.Option("--snapshot", "-s", help="Snapshot JSON (docs/snapshot.schema.json).")
    ],
    config_path: Annotated[
        Path, typer.Option("--config", "-c", help="Folder or file of configuration documents.")
    ],
    now: Annotated[
        str | None,
        typer.Option(
            help="Plan at this RFC 3339 time (default: the snapshot's taken_at, else now)."
        ),
    ] = None,
    fmt: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
) -> None:
    """Print the plan decide.plan() makes for a snapshot: actions and skips, each with its reason."""
    from datetime import datetime

    from burst import catalog, decide
    from burst.clock import SystemClock
    from burst.snapshot import SnapshotError, load_snapshot, plan_document

    cfg = _load_config([config_path])
    try:
        snap = load_snapshot(snapshot.read_bytes())
    except OSError as exc:
        raise _fail(f"cannot read {snapshot}: {exc.strerror}") from None
    except SnapshotError as exc:
        raise _fail(f"{snapshot}: invalid snapshot:\n{exc}") from None
    try:
        at = datetime.fromisoformat(now) if now else (snap.taken_at or SystemClock().now())
    except ValueError:
        raise _fail(f"--now {now!r} is not an RFC 3339 time") from None
    if at.tzinfo is None:
        raise _fail("--now needs a time zone, e.g. 2026-11-30T09:00:00Z")
    offers = catalog.shipped()
    if cfg.service is not None:
        offers = offers.with_overrides(cfg.service.spec.catalog)
    try:
        result = decide.plan(snap, offers, cfg, at)
    except decide.PlanError as exc:
        raise _fail(str(exc)) from None
    if fmt == "json":
        typer.echo(json.dumps(plan_document(result), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
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


UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Database URL (else BURST_DATABASE_URL, "
        "else the ServiceConfig, else sqlite:///burst.db).",
    ),
]


def _engine(url: str | None, config_path: Path | None) -> tuple[Engine, str]:
    from burst import db

    spec = None
    if config_path is not None:
        cfg = _load_config([config_path])
        spec = cfg.service.spec.database if cfg.service else None
    try:
        resolved = db.resolve_url(url, spec)
    except OSError as exc:
        raise _fail(f"cannot read the database password file: {exc.strerror}") from None
    return db.make_engine(resolved), db.safe_url(resolved)


@db_app.command("upgrade")
def db_upgrade(
    url: UrlOption = None,
    config_path: ConfigOption = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Create or migrate the database schema to the latest revision."""
    from sqlalchemy.exc import SQLAlchemyError

    from burst import db

    engine, shown = _engine(url, config_path)
    try:
        db.upgrade(engine, revision)
        typer.echo(f"database {shown} is at revision {db.current_revision(engine)}")
    except SQLAlchemyError as exc:
        raise _fail(
            f"database {shown}: {exc.__class__.__name__}: {getattr(exc, 'orig', None) or exc}"
        ) from None


@db_app.command("check")
def db_check(url: UrlOption = None, config_path: ConfigOption = None) -> None:
    """Exit 0 when the database is at the latest revision and matches the code's tables."""
    from sqlalchemy.exc import SQLAlchemyError

    from burst import db

    engine, shown = _engine(url, config_path)
    try:
        db.check(engine)
    except db.SchemaError as exc:
        raise _fail(f"database {shown}: {exc}") from None
    except SQLAlchemyError as exc:
        raise _fail(
            f"database {shown}: {exc.__class__.__name__}: {getattr(exc, 'orig', None) or exc}"
        ) from None
    typer.echo(f"database {shown} is at revision {db.head_revision()} and matches the tables")


def _estimate(obj: dict[str, Any], cfg: Config, policy: BurstPolicy) -> dict[str, str] | None:
    """Where and for how much the decision would burst this manifest now, if on-prem were full."""
    from burst import catalog, decide
    from burst.clock import SystemClock
    from burst.duration import DurationError, format_duration, parse_duration
    from burst.model import Dispatch, Snapshot, Workload
    from burst.watch import workload_shape

    shaped = workload_shape(obj)
    if shaped is None or cfg.service is None:
        return None
    shape, pods = shaped
    meta = obj.get("metadata") or {}
    now = SystemClock().now()
    runtime = None
    text = (meta.get("annotations") or {}).get(f"{cfg.service.spec.label_prefix}expected-runtime")
    if text:
        try:
            runtime = parse_duration(text)
        except DurationError:
            runtime = None
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
        expected_runtime=runtime,
        cpu_per_pod=shape.cpu,
        memory_gib_per_pod=shape.memory_gib,
    )
    offers = catalog.shipped().with_overrides(cfg.service.spec.catalog)
    plan = decide.plan(Snapshot(workloads=(workload,)), offers, cfg, now)
    sent = next((a for a in plan.actions if isinstance(a, Dispatch)), None)
    if sent is None:
        return None
    where = sent.reason.split("; ")[1].split(", est.")[0]
    used = runtime or policy.spec.defaults.expected_runtime
    return {"cost": str(sent.estimated_cost), "where": where, "runtime": format_duration(used)}


@app.command("explain")
def explain(
    manifest: Annotated[Path, typer.Argument(help="A Job or PyTorchJob manifest (YAML).")],
    config_path: ConfigOption = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format")] = "text",
) -> None:
    """Say whether a workload may burst, under which policy, what its remote copy would be, or why not."""
    import yaml

    from burst.config import Replication, selector_matches
    from burst.translate import translate

    try:
        docs = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8")) if d]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _fail(f"cannot read {manifest}: {exc}") from None
    if not docs or not isinstance(docs[0], dict):
        raise _fail(f"{manifest}: no Kubernetes object in it")
    obj = docs[0]
    cfg = _load_config([config_path]) if config_path else None
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
    reasons += translated.refusals
    estimate = _estimate(obj, cfg, policy) if not reasons and cfg is not None and policy else None
    result = {
        "burstable": not reasons,
        "policy": policy.metadata.name if policy else None,
        "reasons": reasons,
        "estimate": estimate,
        "remote": translated.remote if obj.get("kind") != "Pod" else None,
    }
    if fmt == "json":
        typer.echo(json.dumps(result, indent=2))
        return
    name = f"{obj.get('kind')} {namespace}/{meta.get('name', '?')}"
    if not reasons:
        typer.echo(f"{name} may burst under policy {result['policy']}.")
        if estimate is not None:
            typer.echo(
                f"If it burst now: {estimate['where']}, estimated cost {estimate['cost']} "
                f"(provisioning, {estimate['runtime']} of runtime and the idle tail)."
            )
        typer.echo("Its remote copy would be:")
        typer.echo(yaml.safe_dump(translated.remote, sort_keys=False).rstrip())
        return
    typer.echo(f"{name} would not burst:")
    for reason in reasons:
        typer.echo(f"  - {reason}")


@app.command("report")
def report_cmd(
    period: Annotated[str, typer.Option(help="2026-11, 2026-W47 or 2026-11-01..2026-11-15.")],
    by: Annotated[
        Literal["team", "policy", "provider", "region", "job", "day"], typer.Option()
    ] = "team",
    fmt: Annotated[
        Literal["table", "csv", "json", "md", "html"], typer.Option("--format")
    ] = "table",
    out: Annotated[Path | None, typer.Option(help="Write here instead of standard output.")] = None,
    currency: Annotated[
        str, typer.Option(help="Reporting currency (rates from the ServiceConfig).")
    ] = "USD",
    url: UrlOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Spend, GPU-hours, overhead and idle shares, budgets used and left, with a forecast."""
    from burst import db, report
    from burst.ledger import BudgetLimit
    from burst.money import CurrencyError, Money

    cfg = _load_config([config_path]) if config_path else None
    rates = cfg.service.spec.usd_exchange_rates if cfg and cfg.service else {}
    budgets = [
        BudgetLimit(
            name,
            "team" if b.spec.scope.team else "policy" if b.spec.scope.policy else "namespace",
            b.spec.scope.team or b.spec.scope.policy or b.spec.scope.namespace or "",
            Money.of(b.spec.amount, b.spec.currency),
            b.spec.period,
            b.spec.enforcement == "hard",
        )
        for name, b in sorted((cfg.budgets if cfg else {}).items())
    ]
    engine, shown = _engine(url, config_path)
    try:
        with db.sessions(engine)() as session:
            built = report.build(session, period, by, currency, rates, budgets)
    except report.PeriodError as exc:
        raise _fail(str(exc)) from None
    except CurrencyError as exc:
        raise _fail(f"{exc}; add it to usdExchangeRates in the ServiceConfig") from None
    text = report.render(built, fmt)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        typer.echo(
            f"wrote {out} ({len(built.rows)} rows, total {built.total}) from {shown}", err=True
        )
    else:
        typer.echo(text, nl=False)


@app.command("reconcile")
def reconcile_cmd(
    provider: Annotated[Literal["aws", "gcp", "azure"], typer.Option(help="Whose bill it is.")],
    file: Annotated[Path, typer.Option("--file", help="The billing export (CSV).")],
    url: UrlOption = None,
    config_path: ConfigOption = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format")] = "text",
) -> None:
    """Match a cloud bill to the ledger, record differences as corrections, list unknown lines."""
    from sqlalchemy import select

    from burst import db, reconcile
    from burst.clock import SystemClock
    from burst.tables import LedgerEntry
    from providers.gcp import cloud_name

    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"cannot read {file}: {exc}") from None
    engine, _ = _engine(url, config_path)
    sessions = db.sessions(engine)
    with sessions.begin() as session:
        pools = [p for p in session.scalars(select(LedgerEntry.pool).distinct()) if p]
        try:
            lines = reconcile.parse(provider, text, {cloud_name(p): p for p in pools})
        except (KeyError, ValueError) as exc:
            raise _fail(
                f"{file} is not a billing export of {provider}: {exc.__class__.__name__}: {exc}"
            ) from None
        outcome = reconcile.reconcile(
            session, lines, SystemClock(), day_granularity=provider == "azure"
        )
    if fmt == "json":
        typer.echo(
            json.dumps(
                {
                    "matched": [
                        {"pool": p, "at": t.isoformat(), "amount": m.json()}
                        for p, t, m in outcome.matched
                    ],
                    "differs": [
                        {"pool": p, "at": t.isoformat(), "bill": b.json(), "ledger": led.json()}
                        for p, t, b, led in outcome.differs
                    ],
                    "unknown": [
                        {"at": u.hour.isoformat(), "amount": u.amount.json(), "line": u.description}
                        for u in outcome.unknown
                    ],
                    "corrections": outcome.corrections,
                },
                indent=2,
            )
        )
        return
    typer.echo(f"matched: {len(outcome.matched)} pool-hour(s)")
    for p, t, b, led in outcome.differs:
        typer.echo(
            f"differs: {p} {t:%Y-%m-%d %H}:00 bill {b}, ledger {led}: corrected by {b - led}"
        )
    for u in outcome.unknown:
        typer.echo(f"unknown to burst: {u.hour:%Y-%m-%d %H}:00 {u.amount} {u.description}")


@sandbox_app.command("up")
def sandbox_up(
    nodes: Annotated[int, typer.Option(help="Simulated GPU nodes.")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs on each node.")] = 4,
    gpu: Annotated[str, typer.Option(help="GPU product label of the nodes.")] = "Tesla-V100",
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 0,
    kubeconfig: Annotated[Path, typer.Option(help="Where to write the kubeconfig.")] = Path(
        "sandbox.kubeconfig"
    ),
    token_file: Annotated[
        Path | None,
        typer.Option(help="Require the bearer token in this file (written to the kubeconfig)."),
    ] = None,
    duration: Annotated[
        str,
        typer.Option(
            help="How long a pod runs unless its sandbox.burst.dev/duration annotation says."
        ),
    ] = "30s",
) -> None:
    """Start a sandbox cluster and keep it up until Ctrl-C."""
    import signal
    import threading

    from burst.duration import DurationError, parse_duration
    from burst.sandbox import Sandbox, gpu_node
    from burst.sandbox.resources import BY_KIND

    try:
        default_duration = parse_duration(duration).total_seconds()
    except DurationError as exc:
        raise _fail(str(exc)) from None
    token = token_file.read_text().strip() if token_file else None
    try:
        sandbox = Sandbox(port=port, token=token, default_duration=default_duration).start()
    except OSError as exc:
        raise _fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    for i in range(nodes):
        sandbox.store.create(BY_KIND["Node"], "", gpu_node(f"sandbox-gpu-{i}", gpu, gpus_per_node))
    sandbox.kubeconfig(kubeconfig)
    typer.echo(
        f"sandbox API server at {sandbox.url} with {nodes} node(s) of {gpus_per_node}x {gpu}"
    )
    typer.echo(f"kubeconfig written to {kubeconfig}; try:")
    typer.echo(f"  export KUBECONFIG={kubeconfig.resolve()}")
    typer.echo("  kubectl get nodes")
    typer.echo("Ctrl-C stops it.", err=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with contextlib.suppress(KeyboardInterrupt):
        done.wait()
    sandbox.stop()


@app.command("serve")
def serve(
    config_path: Annotated[
        Path, typer.Option("--config", "-c", help="Folder of configuration documents.")
    ],
    identity: Annotated[
        str | None,
        typer.Option(help="This replica's name in the Lease (default: POD_NAME or the host name)."),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="API port (default: the ServiceConfig's).")
    ] = None,
) -> None:
    """Run the service: reconcile on a schedule while leader, serve the read-only API always."""
    import logging
    import os
    import socket

    from burst import app as service_app
    from burst import db

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _load_config([config_path])  # every problem, as `config validate` prints them
    name = identity or os.environ.get("POD_NAME") or socket.gethostname()
    try:
        service = service_app.build(config_path, name)
    except db.SchemaError as exc:
        raise _fail(f"{exc}") from None
    typer.echo(f"burst serve: {name} standing for election", err=True)
    service_app.run(service, port=port)


@app.command("demo")
def demo_cmd(
    seconds: Annotated[float, typer.Option(help="Stop after this long at most.")] = 90.0,
    seed: Annotated[int, typer.Option(help="Seed of the simulated clouds.")] = 1,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format")] = "text",
    workdir: Annotated[Path, typer.Option(help="Where the database and the report go.")] = Path(
        ".burst-demo"
    ),
) -> None:
    """Run the whole flow on sandbox clusters and simulated clouds, then summarise it."""
    import logging

    from burst import demo

    logging.basicConfig(level=logging.ERROR)

    def say(text: str) -> None:
        if fmt != "json":
            typer.echo(text, err=True)

    say("burst demo: an on-prem sandbox (8 V100, 4 T4), three simulated clouds, jobs arriving...")
    if fmt == "json":
        summary = demo.run(seconds=seconds, seed=seed, workdir=workdir)
    else:
        from rich.console import Console, Group
        from rich.live import Live
        from rich.table import Table

        def view(run: demo.Demo, passes: int) -> Group:
            jobs, pools = demo.board(run)
            left = Table("job", "state", "where", title=f"workloads after {passes} passes")
            for row in jobs:
                left.add_row(*row)
            right = Table("pool", "state", "nodes", title="pools")
            for row in pools:
                right.add_row(*row)
            return Group(left, right)

        with Live(console=Console(stderr=True), auto_refresh=False) as live:
            summary = demo.run(
                seconds=seconds,
                seed=seed,
                workdir=workdir,
                on_pass=lambda run, passes: live.update(view(run, passes), refresh=True),
            )
    if fmt == "json":
        typer.echo(demo.to_json(summary))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"burst demo: {summary['seconds']} s")
    for column in ("job", "ran", "state", "cost", "why"):
        table.add_column(column, overflow="fold")
    for job in summary["jobs"]:
        table.add_row(job["job"], job["ran"], job["state"], job["cost"] or "", job["why"] or "")
    console.print(table)
    console.print(
        f"pools created: {summary['pools_created']}, left running: {summary['pools_left_running']}; "
        f"jobs run twice: {summary['jobs_run_twice']}"
    )
    console.print(
        f"spend: {summary['spend_usd']} USD; by team {summary['spend_by_team']}; "
        f"by provider {summary['spend_by_provider']}"
    )
    console.print(f"report: {summary['report']}")


@app.command("simulate")
def simulate_cmd(
    trace_file: Annotated[
        str,
        typer.Option(
            "--trace",
            "-t",
            help="Trace CSV (job_id, submit_time, duration_s, gpus[, user|queue]), "
            "or a shipped one: philly, openb.",
        ),
    ],
    config_path: Annotated[
        Path, typer.Option("--config", "-c", help="Folder or file of configuration documents.")
    ],
    onprem_gpus: Annotated[
        int | None, typer.Option(help="On-prem GPUs (default: 0.8 x the mean GPU demand).")
    ] = None,
    onprem: Annotated[
        str | None, typer.Option(help='On-prem GPUs per product, e.g. "V100:32,T4:16".')
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of deadlines, teams and clouds.")] = 1,
    deadline_slack: Annotated[
        str, typer.Option(help="Deadline = submit + slack x runtime: uniform:LO:HI or fixed:X.")
    ] = "uniform:1.5:4",
    policy_name: Annotated[
        str | None, typer.Option("--policy", help="The BurstPolicy trace jobs fall under.")
    ] = None,
    with_baselines: Annotated[
        bool,
        typer.Option("--baselines", help="Also run never, no-wait, constant- and compute-wait."),
    ] = False,
    sweep: Annotated[
        bool, typer.Option(help="Vary each policy's main knob: cost against completion time.")
    ] = False,
    fmt: Annotated[Literal["table", "json", "html"], typer.Option("--format")] = "table",
    out: Annotated[Path | None, typer.Option(help="Write there instead of stdout.")] = None,
) -> None:
    """Replay a job trace through burst's decision and simulated clouds, on virtual time; compare
    it with the baselines and with a lower bound on the cloud cost of meeting every deadline."""
    from burst import catalog, compare, simulate, trace

    cfg = _load_config([config_path])
    if cfg.service is None:
        raise _fail(f"{config_path}: no ServiceConfig (its targets are the simulated clouds)")
    shipped_traces = {
        "philly": "microsoft-philly-2017-public.csv",
        "openb": "alibaba-openb-2023-public.csv",
    }
    path = (
        Path(str(resources.files("burst").joinpath("data", "traces", shipped_traces[trace_file])))
        if trace_file in shipped_traces
        else Path(trace_file)
    )
    try:
        policy = simulate.policy_of(cfg, policy_name)
        raw = trace.read(path)
        slack = trace.slack_rule(deadline_slack)
        if onprem is not None and onprem_gpus is not None:
            raise trace.TraceError("give --onprem or --onprem-gpus, not both")
        if onprem is not None:
            sizes = trace.onprem_spec(onprem)
        else:
            sizes = {"V100": onprem_gpus if onprem_gpus is not None else trace.onprem_gpus(raw)}
    except (trace.TraceError, ValueError) as exc:
        raise _fail(str(exc)) from None
    spec = cfg.service.spec
    jobs = trace.derive(
        raw,
        teams=policy.spec.selector.namespaces,
        allowance_s=simulate.deadline_allowance(cfg, policy),
        slack=slack,
        seed=seed,
    )
    offers = catalog.shipped().with_overrides(spec.catalog)
    from rich.console import Console
    from rich.progress import Progress

    errors = Console(stderr=True)
    with Progress(console=errors, transient=True, disable=not errors.is_terminal) as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, share: float) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=1.0)
            bar.update(tasks[label], completed=share)

        result = compare.compare(
            path.name,
            jobs,
            sizes,
            cfg,
            policy,
            offers,
            seed=seed,
            slack=deadline_slack,
            include_baselines=with_baselines,
            sweep=sweep,
            progress=progress,
        )
    text = compare.render(result, cfg, fmt)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n", encoding="utf-8")
        errors.print(f"wrote {out}")


@app.command("version")
def version() -> None:
    """Print burst's version."""
    from burst import __version__

    typer.echo(__version__)


def main() -> None:
    app()

"""`burst report`, `burst reconcile` and `burst ledger verify`: what finance runs. Spend, GPU-hours, idle and overhead,
budgets used and left; and a cloud bill matched against the ledger, differences booked as
corrections."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from burst.cli.options import ConfigOption, OutOption, UrlOption, fail, load_config, open_schema


def report_cmd(
    period: Annotated[str, typer.Option(help="2026-11, 2026-W47 or 2026-11-01..2026-11-15.")],
    by: Annotated[
        Literal["team", "policy", "provider", "region", "job", "day"], typer.Option()
    ] = "team",
    fmt: Annotated[
        Literal["text", "csv", "json", "md", "html"], typer.Option("--format", "-f")
    ] = "text",
    out: OutOption = None,
    currency: Annotated[
        str, typer.Option(help="Reporting currency (rates from the ServiceConfig).")
    ] = "USD",
    share: Annotated[
        bool,
        typer.Option(
            "--share-idle",
            help="Spread each pool's idle and overhead over the teams whose jobs used it.",
        ),
    ] = False,
    url: UrlOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Spend, GPU-hours, overhead and idle shares, budgets used and left, with a forecast."""
    from burst.amounts import CurrencyError
    from burst.money import render, report
    from burst.money.ledger import budget_limits
    from burst.store import database

    cfg = load_config(config_path) if config_path else None
    budgets = budget_limits(cfg) if cfg else []
    zone = cfg.service.spec.time_zone if cfg and cfg.service else "UTC"
    try:
        start, _ = report.parse_period(period, zone)
    except report.PeriodError as exc:
        raise fail(str(exc)) from None
    # The rates of the period's start: a rate added later does not change this report.
    spec = cfg.service.spec if cfg and cfg.service else None
    rates = spec.usd_rates(start) if spec else {}
    notes = spec.rate_notes(start) if spec else {}
    engine, shown = open_schema(url, config_path)
    try:
        with database.sessions(engine)() as session:
            built = report.build(
                session, period, by, currency, rates, budgets, zone=zone, share=share
            )
            built.rate_notes = {c: notes[c] for c in built.rates if c in notes}
    except report.PeriodError as exc:
        raise fail(str(exc)) from None
    except CurrencyError as exc:
        raise fail(f"{exc}; add it to usdExchangeRates in the ServiceConfig") from None
    text = render.render(built, fmt)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        typer.echo(
            f"wrote {out} ({len(built.rows)} rows, total {built.total}) from {shown}", err=True
        )
    else:
        typer.echo(text, nl=False)


def reconcile_cmd(
    file: Annotated[Path, typer.Option("--file", help="The billing export (CSV or JSON lines).")],
    form: Annotated[
        Literal["auto", "aws-cur2", "aws-cur", "gcp", "azure-ea", "azure-mca", "focus"],
        typer.Option("--bill-format", help="The export's format (auto: from its header)."),
    ] = "auto",
    provider: Annotated[
        Literal["aws", "gcp", "azure"] | None,
        typer.Option(help="Whose bill it is (accepted for scripts; the format says it)."),
    ] = None,
    url: UrlOption = None,
    config_path: ConfigOption = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f")] = "text",
) -> None:
    """Match a cloud bill to the ledger, record differences as corrections, report the rest."""
    from sqlalchemy import select

    from burst.amounts import CurrencyError
    from burst.clock import SystemClock
    from burst.money import bills, reconcile
    from burst.store import database
    from burst.store.tables import LedgerEntry
    from providers.azure import cloud_name as aks_name
    from providers.gcp import cloud_name as gke_name

    del provider  # the format names the cloud
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {file}: {exc}") from None
    cfg = load_config(config_path) if config_path else None
    spec = cfg.service.spec if cfg and cfg.service else None
    engine, _ = open_schema(url, config_path)
    sessions = database.sessions(engine)
    with sessions.begin() as session:
        pools = [p for p in session.scalars(select(LedgerEntry.pool).distinct()) if p]
        names = {gke_name(p): p for p in pools} | {aks_name(p): p for p in pools}
        try:
            lines = bills.parse(text, names, None if form == "auto" else form)
            # Each line at the rates of its own date.
            if spec:
                outcome = reconcile.reconcile(session, lines, SystemClock(), spec.usd_rates)
            else:
                outcome = reconcile.reconcile(session, lines, SystemClock())
        except bills.BillError as exc:
            raise fail(f"{file}: {exc}") from None
        except CurrencyError as exc:
            raise fail(str(exc)) from None
    if fmt == "json":
        typer.echo(json.dumps(_outcome_json(outcome), indent=2))
        return
    typer.echo(f"matched: {len(outcome.matched)} pool span(s)")
    for (pool, start, _), bill, ledger in outcome.differs:
        typer.echo(
            f"differs: {pool} {start:%Y-%m-%d %H}:00 bill {bill}, ledger {ledger}: "
            f"corrected by {bill - ledger}"
        )
    for (pool, start, _), amount in outcome.missing_from_ledger:
        typer.echo(f"billed, not in the ledger: {pool} {start:%Y-%m-%d %H}:00 {amount}")
    for (pool, start, _), amount in outcome.missing_from_bill:
        typer.echo(f"in the ledger, not billed: {pool} {start:%Y-%m-%d %H}:00 {amount}")
    for kind, amount in outcome.beside:
        typer.echo(f"{kind} (not a pool's): {amount}")
    for line in outcome.unknown:
        typer.echo(
            f"unknown to burst: {line.start:%Y-%m-%d %H}:00 {line.amount} {line.description}"
        )
    for code, used in outcome.rates.items():
        shown = ", ".join(str(r) for r in used)
        typer.echo(f"converted at {shown} {code} per USD (usdExchangeRates, by line date)")


def _outcome_json(outcome: Any) -> dict[str, Any]:
    def span(s: Any) -> dict[str, str]:
        return {"pool": s[0], "at": s[1].isoformat(), "end": s[2].isoformat()}

    return {
        "matched": [{**span(s), "amount": m.json()} for s, m in outcome.matched],
        "differs": [
            {**span(s), "bill": b.json(), "ledger": led.json()} for s, b, led in outcome.differs
        ],
        "missing_from_ledger": [
            {**span(s), "amount": m.json()} for s, m in outcome.missing_from_ledger
        ],
        "missing_from_bill": [
            {**span(s), "amount": m.json()} for s, m in outcome.missing_from_bill
        ],
        "beside": [{"type": k, "amount": m.json()} for k, m in outcome.beside],
        "unknown": [
            {"at": u.start.isoformat(), "amount": u.amount.json(), "line": u.description}
            for u in outcome.unknown
        ],
        "corrections": outcome.corrections,
        "rates_per_usd": {c: ", ".join(map(str, used)) for c, used in outcome.rates.items()},
    }


def export_cmd(
    period: Annotated[str, typer.Option(help="2026-11, 2026-W47 or 2026-11-01..2026-11-15.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="FILE.csv or FILE.parquet.")],
    url: UrlOption = None,
    config_path: ConfigOption = None,
) -> None:
    """The period's ledger rows in FinOps FOCUS 1.2 columns, as CSV or Parquet."""
    from burst.money import focus, report
    from burst.store import database

    if out.suffix not in (".csv", ".parquet"):
        raise fail(f"{out}: give a .csv or .parquet file")
    cfg = load_config(config_path) if config_path else None
    zone = cfg.service.spec.time_zone if cfg and cfg.service else "UTC"
    installation = cfg.service.spec.installation_id if cfg and cfg.service else "burst"
    try:
        start, end = report.parse_period(period, zone)
    except report.PeriodError as exc:
        raise fail(str(exc)) from None
    engine, shown = open_schema(url, config_path)
    write = focus.write_parquet if out.suffix == ".parquet" else focus.write_csv
    try:
        with database.sessions(engine)() as session:
            count = write(out, focus.rows(session, start, end, installation))
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror}") from None
    typer.echo(f"wrote {out}: {count} FOCUS row(s) from {shown}", err=True)


ledger_app = typer.Typer(help="Check the cost ledger.", no_args_is_help=True)


@ledger_app.command("verify")
def ledger_verify(url: UrlOption = None, config_path: ConfigOption = None) -> None:
    """Recompute the ledger's hash chain: exit 1, naming the rows, if any was changed or removed."""
    from burst.money import chain
    from burst.store import database

    engine, shown = open_schema(url, config_path)
    with database.sessions(engine)() as session:
        checked, broken = chain.verify(session)
    for b in broken:
        typer.echo(f"row {b.row_id} {b.why}")
    if broken:
        raise fail(f"the ledger of {shown} is not as it was posted ({len(broken)} break(s))")
    typer.echo(f"ok: {checked} ledger row(s) chained as posted in {shown}")

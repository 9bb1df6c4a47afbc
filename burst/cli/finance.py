"""`burst report`, `burst reconcile` and `burst ledger verify`: what finance runs. Spend, GPU-hours, idle and overhead,
budgets used and left; and a cloud bill matched against the ledger, differences booked as
corrections."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

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
    url: UrlOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Spend, GPU-hours, overhead and idle shares, budgets used and left, with a forecast."""
    from burst.amounts import CurrencyError
    from burst.money import report
    from burst.money.ledger import budget_limits
    from burst.store import database

    cfg = load_config(config_path) if config_path else None
    rates = cfg.service.spec.usd_exchange_rates if cfg and cfg.service else {}
    budgets = budget_limits(cfg) if cfg else []
    try:
        report.parse_period(period)
    except report.PeriodError as exc:
        raise fail(str(exc)) from None
    engine, shown = open_schema(url, config_path)
    try:
        with database.sessions(engine)() as session:
            built = report.build(session, period, by, currency, rates, budgets)
    except report.PeriodError as exc:
        raise fail(str(exc)) from None
    except CurrencyError as exc:
        raise fail(f"{exc}; add it to usdExchangeRates in the ServiceConfig") from None
    text = report.render(built, fmt)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        typer.echo(
            f"wrote {out} ({len(built.rows)} rows, total {built.total}) from {shown}", err=True
        )
    else:
        typer.echo(text, nl=False)


def reconcile_cmd(
    provider: Annotated[Literal["aws", "gcp", "azure"], typer.Option(help="Whose bill it is.")],
    file: Annotated[Path, typer.Option("--file", help="The billing export (CSV).")],
    url: UrlOption = None,
    config_path: ConfigOption = None,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f")] = "text",
) -> None:
    """Match a cloud bill to the ledger, record differences as corrections, list unknown lines."""
    from sqlalchemy import select

    from burst.clock import SystemClock
    from burst.money import bills
    from burst.store import database
    from burst.store.tables import LedgerEntry
    from providers.gcp import cloud_name

    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {file}: {exc}") from None
    engine, _ = open_schema(url, config_path)
    sessions = database.sessions(engine)
    with sessions.begin() as session:
        pools = [p for p in session.scalars(select(LedgerEntry.pool).distinct()) if p]
        try:
            lines = bills.parse(provider, text, {cloud_name(p): p for p in pools})
        except (KeyError, ValueError) as exc:
            raise fail(
                f"{file} is not a billing export of {provider}: {exc.__class__.__name__}: {exc}"
            ) from None
        outcome = bills.reconcile(
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


ledger_app = typer.Typer(help="Check the cost ledger.", no_args_is_help=True)


@ledger_app.command("verify")
def ledger_verify(url: UrlOption = None, config_path: ConfigOption = None) -> None:
    """Recompute the ledger's hash chain: exit 1, naming the rows, if any was changed or removed."""
    from burst.money import ledger
    from burst.store import database

    engine, shown = open_schema(url, config_path)
    with database.sessions(engine)() as session:
        checked, broken = ledger.verify(session)
    for b in broken:
        typer.echo(f"row {b.row_id} {b.why}")
    if broken:
        raise fail(f"the ledger of {shown} is not as it was posted ({len(broken)} break(s))")
    typer.echo(f"ok: {checked} ledger row(s) chained as posted in {shown}")

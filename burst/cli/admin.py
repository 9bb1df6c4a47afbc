"""`burst config validate`, `burst db upgrade|check` and `burst target check`: what an admin runs
to set burst up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from burst.cli.options import ConfigOption, UrlOption, fail, open_engine, require_config

config_app = typer.Typer(help="Check the YAML configuration documents.", no_args_is_help=True)
db_app = typer.Typer(help="Create and check the database schema.", no_args_is_help=True)


@config_app.command("validate")
def config_validate(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders of YAML documents.")],
) -> None:
    """Validate documents: exit 0 when valid, else one `FILE:LINE:COLUMN: field: message` per problem."""
    from burst import config
    from burst.cloud import catalog

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise fail(f"no such file or folder: {', '.join(missing)}")
    shipped = catalog.shipped()
    try:
        cfg = config.load(paths, config.Vocabulary(shipped.regions(), shipped.accelerators()))
    except config.ConfigError as exc:
        for problem in exc.problems:
            typer.echo(str(problem))
        raise typer.Exit(1) from None
    counts = {
        "ServiceConfig": int(cfg.service is not None),
        "BurstPolicy": len(cfg.policies),
        "Budget": len(cfg.budgets),
    }
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    if not summary:  # nothing of burst's in them: a wrong folder, not a valid configuration
        raise fail(
            f"no burst document (apiVersion: burst.dev/v1) in {len(cfg.files)} file(s) "
            f"under {', '.join(map(str, paths))}"
        )
    typer.echo(f"ok: {len(cfg.files)} file(s), {summary}")
    if cfg.service is None and cfg.policies:
        typer.echo("note: no ServiceConfig given, so policy targets were not checked", err=True)


def _database_error(shown: str, exc: Exception) -> typer.Exit:
    return fail(f"database {shown}: {exc.__class__.__name__}: {getattr(exc, 'orig', None) or exc}")


@db_app.command("upgrade")
def db_upgrade(
    url: UrlOption = None,
    config_path: ConfigOption = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Create or migrate the database schema to the latest revision."""
    from sqlalchemy.exc import SQLAlchemyError

    from burst.store import database

    engine, shown = open_engine(url, config_path)
    try:
        database.upgrade(engine, revision)
        typer.echo(f"database {shown} is at revision {database.current_revision(engine)}")
    except SQLAlchemyError as exc:
        raise _database_error(shown, exc) from None


@db_app.command("check")
def db_check(url: UrlOption = None, config_path: ConfigOption = None) -> None:
    """Exit 0 when the database is at the latest revision and matches the code's tables."""
    from sqlalchemy.exc import SQLAlchemyError

    from burst.store import database

    engine, shown = open_engine(url, config_path)
    path = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if path and path != ":memory:" and not Path(path).exists():
        raise fail(f"no database at {shown}: create it with `burst db upgrade`")
    try:
        database.check(engine)
    except database.SchemaError as exc:
        raise fail(f"database {shown}: {exc}") from None
    except SQLAlchemyError as exc:
        raise _database_error(shown, exc) from None
    typer.echo(f"database {shown} is at revision {database.head_revision()} and matches the tables")


target_app = typer.Typer(help="Check cloud targets before trusting them.", no_args_is_help=True)


@target_app.command("check")
def target_check(
    config_path: ConfigOption = None,
    target: Annotated[
        list[str] | None, typer.Option("--target", "-t", help="Only these targets.")
    ] = None,
) -> None:
    """Read-only: the credentials reach each target's cluster, burst may list its pools there, and
    the cloud's GPU quotas hold the smallest shape the policies allow. Exit 1 if anything fails."""
    import logging

    import providers
    from burst.clock import SystemClock
    from burst.cloud import catalog
    from burst.cloud.check import allowed_offers, check_target

    # azure-identity logs every credential it tried; the finding's line says what failed.
    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    cfg = require_config(config_path, "target check")
    if cfg.service is None:
        raise fail("burst target check needs a ServiceConfig in the configuration")
    chosen = [t for t in cfg.service.spec.targets if not target or t.name in target]
    unknown = sorted(set(target or ()) - {t.name for t in chosen})
    if unknown:
        raise fail(f"no target {', '.join(unknown)} in the ServiceConfig")
    shipped = catalog.shipped()
    built = providers.build(cfg.service, shipped, SystemClock())
    failed = False
    for spec in chosen:
        offers = allowed_offers(spec, cfg, shipped)
        for f in check_target(
            spec.name, built[spec.name], cfg.service.spec.installation_id, offers
        ):
            mark = {True: "ok", False: "FAIL", None: "-"}[f.ok]
            typer.echo(f"{mark:4} {f.target}  {f.what}: {f.detail}")
            failed = failed or f.ok is False
    if failed:
        raise typer.Exit(1)

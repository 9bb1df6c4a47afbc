"""What every `burst` command shares: the same option for the same thing (`--config/-c`, `--url`,
`--format` with `text` as the human form, `--out`), one-line errors, and the configuration loaded with every problem printed.

Nothing heavy is imported here: `burst --help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from burst.config import Config

CONFIG_ENV = "BURST_CONFIG"

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        envvar=CONFIG_ENV,
        show_envvar=True,
        help="Folder or file of configuration documents.",
    ),
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Database URL (else BURST_DATABASE_URL, else the ServiceConfig's, "
        "else sqlite:///burst.db).",
    ),
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Write there instead of standard output."),
]


def fail(message: str) -> typer.Exit:
    """Print `error: message` on stderr; raise the returned Exit (status 1)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def load_config(path: Path) -> Config:
    """Load configuration with the catalog's vocabulary; print every problem and exit 1 if any."""
    from burst import config
    from burst.cloud import catalog

    shipped = catalog.shipped()
    vocabulary = config.Vocabulary(shipped.regions(), shipped.accelerators())
    if not path.exists():
        raise fail(f"no such file or folder: {path}")
    try:
        return config.load([path], vocabulary)
    except config.ConfigError as exc:
        for problem in exc.problems:
            typer.echo(str(problem))
        raise typer.Exit(1) from None


def require_config(path: Path | None, command: str) -> Config:
    """The configuration a command cannot work without."""
    if path is None:
        raise fail(
            f"burst {command} needs a configuration: give --config/-c PATH or set {CONFIG_ENV}"
        )
    return load_config(path)


def open_engine(url: str | None, config_path: Path | None) -> tuple[Engine, str]:
    """The database engine for a command and its URL without a password, for messages."""
    from burst.store import database

    spec = None
    if config_path is not None:
        cfg = load_config(config_path)
        spec = cfg.service.spec.database if cfg.service else None
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        resolved = database.resolve_url(url, spec)
        return database.make_engine(resolved), database.safe_url(resolved)
    except OSError as exc:
        raise fail(f"cannot read the database password file: {exc.strerror}") from None
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise fail(f"not a database URL: {str(exc).splitlines()[0]}") from None


def open_schema(url: str | None, config_path: Path | None) -> tuple[Engine, str]:
    """The engine of a database that holds burst's schema at the code's revision; anything else
    is a one-line error that says what to run, and nothing is created (not even a SQLite file)."""
    from sqlalchemy.exc import SQLAlchemyError

    from burst.store import database

    engine, shown = open_engine(url, config_path)
    path = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if path and path != ":memory:" and not Path(path).exists():
        raise fail(f"no database at {shown}: create it with `burst db upgrade`")
    try:
        current = database.current_revision(engine)
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise fail(f"database {shown}: {first}") from None
    head = database.head_revision()
    if current != head:
        raise fail(
            f"database {shown} is at revision {current or 'none (no schema)'}, burst needs "
            f"{head}: run `burst db upgrade`"
        )
    return engine, shown


def console_width() -> int | None:
    """Piped output has no terminal width to fit; keep rows whole rather than wrap them."""
    return None if sys.stdout.isatty() else 160

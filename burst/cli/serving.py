"""`burst serve`: the service itself, reconciling while it leads and serving the read-only API."""

from __future__ import annotations

from typing import Annotated

import typer

from burst.cli.options import ConfigOption, fail, require_config


def serve(
    config_path: ConfigOption = None,
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
    from burst.service import logs
    from burst.store import database

    logs.configure(logging.INFO)
    require_config(config_path, "serve")  # every problem, as `config validate` prints them
    assert config_path is not None
    name = identity or os.environ.get("POD_NAME") or socket.gethostname()
    try:
        service = service_app.build(config_path, name)
    except (database.SchemaError, service_app.StartupError) as exc:
        raise fail(f"{exc}") from None
    typer.echo(f"burst serve: {name} standing for election", err=True)
    service_app.run(service, port=port)

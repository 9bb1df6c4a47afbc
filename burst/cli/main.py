"""The `burst` command line: the top of the flow, where people meet it.

One module per command group: admin (config validate, db), offers (catalog), decisions (plan,
explain), finance (report, reconcile), serving (serve), local (demo, sandbox up), simulation
(simulate). The same option means the same thing everywhere (cli/options.py). Each command imports
what it needs inside its body, so `burst --help` stays fast and cloud SDKs and the kubernetes
client load only for the commands that use them.
"""

from __future__ import annotations

from typing import Annotated

import typer

from burst import __version__
from burst.cli import admin, decisions, finance, local, offers, serving, simulation

app = typer.Typer(
    name="burst",
    help="Burst pending GPU workloads from an on-prem Kubernetes cluster to cloud GPU node pools.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(admin.config_app, name="config")
app.add_typer(admin.db_app, name="db")
app.add_typer(admin.target_app, name="target")
app.add_typer(finance.ledger_app, name="ledger")
app.add_typer(local.sandbox_app, name="sandbox")
app.command("catalog")(offers.catalog_cmd)
app.command("plan")(decisions.plan_cmd)
app.command("explain")(decisions.explain)
app.command("report")(finance.report_cmd)
app.command("reconcile")(finance.reconcile_cmd)
app.command("export")(finance.export_cmd)
app.command("serve")(serving.serve)
app.command("demo")(local.demo_cmd)
app.command("simulate")(simulation.simulate_cmd)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"burst {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="Print burst's version and exit.",
        ),
    ] = False,
) -> None:
    """Burst pending GPU workloads from an on-prem Kubernetes cluster to cloud GPU node pools."""


@app.command("version")
def version() -> None:
    """Print burst's version."""
    typer.echo(f"burst {__version__}")


def main() -> None:
    app()

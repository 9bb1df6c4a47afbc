"""`burst demo` and `burst sandbox up`: burst on this machine. The demo runs the whole flow on
sandbox clusters and simulated clouds; `sandbox up` starts a local Kubernetes API server with
simulated GPU nodes for kubectl and for trying burst against."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Literal

import typer

from burst.cli.options import console_width, fail

sandbox_app = typer.Typer(
    help="A local Kubernetes API server with simulated GPU nodes.", no_args_is_help=True
)


def demo_cmd(
    seconds: Annotated[float, typer.Option(help="Stop after this long at most.")] = 90.0,
    seed: Annotated[int, typer.Option(help="Seed of the simulated clouds.")] = 1,
    fmt: Annotated[Literal["text", "json"], typer.Option("--format", "-f")] = "text",
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

    console = Console(width=console_width())
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
    kinds = summary["spend_by_kind"]
    if kinds.get("idle") or kinds.get("overhead"):
        # The demo's pools live for seconds and every cloud bills a node for a minute at least:
        # most of its spend is nobody's job, and a team missing from the job table gets it.
        console.print(
            f"of which jobs {kinds.get('usage', '0')} USD; idle {kinds.get('idle', '0')} and "
            f"overhead {kinds.get('overhead', '0')} USD (nodes billed while no job ran on them: "
            "starting, each cloud's minimum billed time, draining) are the pools' own and go to "
            f"their policy's team ({', '.join(summary['pool_teams'])}); "
            "`burst report --share-idle` spreads them over the teams whose jobs used the pools"
        )
    console.print(f"report: {summary['report']}")


@sandbox_app.command("up")
def sandbox_up(
    nodes: Annotated[int, typer.Option(help="Simulated GPU nodes.")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs on each node.")] = 4,
    gpu: Annotated[
        str,
        typer.Option(help="GPU product label of the nodes, as GPU feature discovery writes it."),
    ] = "Tesla-V100-SXM2-16GB",
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

    from burst.durations import DurationError, parse_duration
    from burst.sandbox import Sandbox, gpu_node
    from burst.sandbox.resources import BY_KIND

    try:
        default_duration = parse_duration(duration).total_seconds()
    except DurationError as exc:
        raise fail(str(exc)) from None
    token = token_file.read_text().strip() if token_file else None
    try:
        sandbox = Sandbox(port=port, token=token, default_duration=default_duration).start()
    except OSError as exc:
        raise fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
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

"""`burst catalog`: what can be launched where, at what price, cheapest first."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Literal, cast

import typer

from burst.cli.options import ConfigOption, console_width, fail, load_config

if TYPE_CHECKING:
    from burst.model import Cloud


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
    capacity: Annotated[
        Literal["on-demand", "spot"] | None, typer.Option(help="On-demand or spot only.")
    ] = None,
    config_path: ConfigOption = None,
    limit: Annotated[int, typer.Option(help="Show at most this many offers (0 = all).")] = 20,
    fmt: Annotated[Literal["text", "json", "csv"], typer.Option("--format", "-f")] = "text",
) -> None:
    """List offers from the price catalog, cheapest first, with the config's overrides applied."""
    from burst.cloud import catalog

    offers_catalog = catalog.shipped()
    if config_path is not None:
        cfg = load_config(config_path)
        if cfg.service is not None:
            offers_catalog = offers_catalog.with_overrides(cfg.service.spec.catalog)
    known = offers_catalog.accelerators()
    unknown = sorted(set(accelerator or []) - known)
    if unknown:
        raise fail(f"unknown accelerator {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    bad_clouds = sorted(set(provider or []) - {"aws", "gcp", "azure"})
    if bad_clouds:
        raise fail(f"unknown provider {', '.join(bad_clouds)}; known: aws, gcp, azure")
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
    Console(width=console_width()).print(table)

"""`burst simulate`: replay a job trace through burst's decision and simulated clouds on virtual
time, beside the baselines and a lower bound."""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from burst.cli.options import ConfigOption, OutOption, fail, require_config
from burst.durations import DurationError, parse_duration

if TYPE_CHECKING:
    from burst.config import Config


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
    config_path: ConfigOption = None,
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
        str | None,
        typer.Option(
            "--policy",
            help="The BurstPolicy trace jobs fall under; several, comma-separated: the jobs' teams "
            "spread over all their namespaces, each job under its namespace's policy (burst "
            "alone: the baselines, the sweep and the optimum replay one policy).",
        ),
    ] = None,
    with_baselines: Annotated[
        bool,
        typer.Option(
            "--baselines",
            help="Also run never, no-wait, constant-wait, compute-wait and starburst.",
        ),
    ] = False,
    sweep: Annotated[
        bool, typer.Option(help="Vary each policy's main knob: cost against completion time.")
    ] = False,
    clouds: Annotated[
        Literal["realistic", "ideal"],
        typer.Option(
            help="realistic: launch latencies, refusals, failures and spot reclaims; ideal: "
            "instant clouds that never refuse, fail or reclaim (as Starburst's simulator's), "
            "which burst's targets are told (a launch of 0s, no reclaims)."
        ),
    ] = "realistic",
    runtimes: Annotated[
        Literal["exact", "noisy", "learned", "none"],
        typer.Option(
            help="What burst is told of each job's runtime: exact; noisy (a user's guess, "
            "off by x1.6 a third of the time); learned (from the jobs seen to finish); none "
            "(the policy's default)."
        ),
    ] = "exact",
    workers: Annotated[
        int,
        typer.Option(min=1, help="Replays at once, in local processes (one: here, in turn)."),
    ] = 1,
    dask: Annotated[
        str | None,
        typer.Option(
            help="Run the replays on this Dask scheduler (tcp://host:8786) instead; its workers "
            "need burst installed (the dask extra: pip install 'burst[dask]')."
        ),
    ] = None,
    wait_price: Annotated[
        str | None,
        typer.Option(
            help="Burst's price on waiting, per GPU-hour in the policy's currency (its "
            "trigger.waitPrice, instead of the configuration's).",
        ),
    ] = None,
    wait_per_gpu_hour: Annotated[
        str | None,
        typer.Option(
            help="Burst's wait per GPU-hour of a run before it bursts, e.g. 1m (its "
            "trigger.waitPerGpuHour, instead of the configuration's): Starburst's compute-wait.",
        ),
    ] = None,
    max_spot_delay: Annotated[
        str | None,
        typer.Option(
            help="Spot only for runs its interruptions are expected to delay by at most this, "
            "e.g. 5m (the policy's placement.maxSpotDelay, instead of the configuration's).",
        ),
    ] = None,
    idle_ttl_choice: Annotated[
        Literal["fixed", "next-arrival"] | None,
        typer.Option(
            help="How burst keeps an idle pool (the policy's teardown.idleTtlChoice, instead of "
            "the configuration's): fixed, for its idleTtl; next-arrival, for at most that, and "
            "deleted as soon as no work for it is expected before a new pool could launch.",
        ),
    ] = None,
    deadline_runtime_share: Annotated[
        str | None,
        typer.Option(
            help="The share of each runtime told that burst's deadline trigger counts, e.g. 0.5 "
            "(its trigger.deadlineRuntimeShare, instead of the configuration's): below 1, a job "
            "bursts for its deadline only when a run that much shorter would still miss it; "
            "'measured': the share nine runs in ten reached on a first replay of burst with the "
            "runtimes asked (--runtimes).",
        ),
    ] = None,
    queueing: Annotated[
        Literal["StrictFIFO", "BestEffortFIFO"] | None,
        typer.Option(
            help="How the on-prem cluster starts waiting jobs, for every policy (instead of the "
            "ServiceConfig's onPrem.queueing): StrictFIFO, nothing past the head; "
            "BestEffortFIFO, a job that fits starts past an older one that does not.",
        ),
    ] = None,
    margin: Annotated[
        str | None,
        typer.Option(
            help="Burst's deadline safety margin, instead of the configuration's: a duration (30m), "
            "a share of each job's runtime (25%), or measured on a first replay of burst with the "
            "runtimes asked (--runtimes): 'measured', the 90th percentile of how much longer jobs "
            "ran than burst was told; 'measured-share', the same as a share of the runtime told.",
        ),
    ] = None,
    optimum: Annotated[
        int,
        typer.Option(
            min=0,
            help="Also plan the trace exactly, window by window of this many jobs (a few hundred; "
            "a mixed-integer program each), and report each policy's cost against it; 0: no.",
        ),
    ] = 0,
    fmt: Annotated[Literal["text", "json", "html"], typer.Option("--format", "-f")] = "text",
    out: OutOption = None,
) -> None:
    """Replay a job trace through burst's decision and simulated clouds, on virtual time; compare
    it with the baselines and with a lower bound on the cloud cost of meeting every deadline."""
    from burst.cloud import catalog
    from burst.sim import compare, simulate, trace, variants
    from burst.sim.state import CLOUD_MODELS

    cfg = require_config(config_path, "simulate")
    if cfg.service is None:
        raise fail(f"{config_path}: no ServiceConfig (its targets are the simulated clouds)")
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
        asked = [n.strip() for n in policy_name.split(",")] if policy_name else [None]
        names = [simulate.policy_of(cfg, n).metadata.name for n in asked]
        if len(names) > 1 and (with_baselines or sweep or optimum):
            raise ValueError("--baselines, --sweep and --optimum replay one policy: name one")
        for name in names:
            cfg = _knobs(
                cfg,
                name,
                wait_price,
                wait_per_gpu_hour,
                max_spot_delay,
                idle_ttl_choice,
                deadline_runtime_share,
                margin,
            )
        if queueing is not None:
            cfg = variants.with_queueing(cfg, queueing)
        cfg = variants.stated(cfg, CLOUD_MODELS[clouds])
        name = names[0]
        policy = cfg.policies[name]
        teams = list(
            dict.fromkeys(ns for n in names for ns in cfg.policies[n].spec.selector.namespaces)
        )
        raw = trace.read(path)
        slack = trace.slack_rule(deadline_slack)
        if onprem is not None and onprem_gpus is not None:
            raise trace.TraceError("give --onprem or --onprem-gpus, not both")
        if onprem is not None:
            sizes = trace.onprem_spec(onprem)
        else:
            sizes = {"V100": onprem_gpus if onprem_gpus is not None else trace.onprem_gpus(raw)}
    except (trace.TraceError, ValueError) as exc:
        raise fail(str(exc)) from None
    assert cfg.service is not None  # checked above; a changed trigger keeps it
    spec = cfg.service.spec
    jobs = trace.derive(
        raw,
        teams=teams,
        slack=slack,
        seed=seed,
    )
    offers = catalog.shipped().with_overrides(spec.catalog)
    from rich.console import Console
    from rich.progress import Progress

    errors = Console(stderr=True)
    with (
        contextlib.ExitStack() as stack,
        Progress(console=errors, transient=True, disable=not errors.is_terminal) as bar,
    ):
        tasks: dict[str, Any] = {}

        said: dict[str, int] = {}

        def progress(label: str, share: float) -> None:
            if not errors.is_terminal:  # a log (CI, a batch job): a line every tenth of the way
                tenth = int(share * 10)
                if tenth > said.get(label, -1):
                    said[label] = tenth
                    errors.print(f"{label}: {tenth * 10} %", highlight=False)
                return
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=1.0)
            bar.update(tasks[label], completed=share)

        if margin in variants.MEASURED or deadline_runtime_share == "measured":
            first = simulate.World(
                jobs, sizes, cfg, offers, seed=seed, clouds=CLOUD_MODELS[clouds], runtimes=runtimes
            ).run(simulate.Burst(cfg), lambda share: progress("measuring runtime error", share))
            said_how = f"measured on a replay of burst with --runtimes {runtimes}"
            if margin in variants.MEASURED:
                chosen = variants.measured(first, margin)
                if chosen is not None:
                    for name in names:
                        cfg = variants.with_margin(cfg, name, *chosen)
                words = "as configured (no runtime told)"
                if chosen is not None:
                    words = variants.worded(*chosen)
                errors.print(f"margin: {words}, {said_how}", highlight=False, soft_wrap=True)
            if deadline_runtime_share == "measured":
                found = variants.measured_runtime_share(first)
                if found is not None:
                    for name in names:
                        cfg = variants.with_trigger(cfg, name, deadline_runtime_share=found)
                words = "as configured (no runtime told)" if found is None else f"{found:g}"
                errors.print(
                    f"deadline runtime share: {words}, {said_how}", highlight=False, soft_wrap=True
                )
            policy = cfg.policies[names[0]]
        runner = stack.enter_context(_executor(workers, dask))
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
            clouds=CLOUD_MODELS[clouds],
            progress=progress,
            executor=runner,
            runtimes=runtimes,
            optimum=optimum,
        )
    text = compare.render(result, cfg, fmt)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n", encoding="utf-8")
        errors.print(f"wrote {out}")


@contextlib.contextmanager
def _executor(workers: int, dask: str | None) -> Iterator[Executor | None]:
    """Where the replays run: a Dask cluster's executor, local processes, or None (here)."""
    if dask is not None:
        try:
            from distributed import Client
        except ImportError:
            raise fail("--dask needs the dask extra: pip install 'burst[dask]'") from None
        try:
            client = Client(dask, timeout=30)  # type: ignore[no-untyped-call]
        except OSError as exc:
            raise fail(f"--dask {dask}: cannot reach the scheduler ({exc})") from None
        with client:
            yield client.get_executor()  # type: ignore[no-untyped-call]
    elif workers > 1:
        # Spawned, not forked: the parent has threads (the progress display), which a fork copies
        # in whatever state they are.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool
    else:
        yield None


def _knobs(
    cfg: Config,
    name: str,
    wait_price: str | None,
    wait_per_gpu_hour: str | None,
    max_spot_delay: str | None,
    idle_ttl_choice: str | None,
    deadline_runtime_share: str | None,
    margin: str | None,
) -> Config:
    """The configuration with policy `name`'s knobs as the command line sets them (a measured
    margin or runtime share is set once a first replay has measured it)."""
    from burst.sim import variants

    if wait_price is not None:
        try:
            price = Decimal(wait_price)
        except InvalidOperation:
            price = Decimal("NaN")
        if not price.is_finite() or price < 0:
            raise ValueError(f"--wait-price: {wait_price!r} is not a price of 0 or more")
        cfg = variants.with_trigger(cfg, name, wait_price=price)
    if wait_per_gpu_hour is not None:
        per_gpu_hour = _duration("--wait-per-gpu-hour", wait_per_gpu_hour)
        cfg = variants.with_trigger(cfg, name, wait_per_gpu_hour=per_gpu_hour)
    if max_spot_delay is not None:
        delay = _duration("--max-spot-delay", max_spot_delay)
        cfg = variants.with_placement(cfg, name, max_spot_delay=delay)
    if idle_ttl_choice is not None:
        cfg = variants.with_teardown(cfg, name, idle_ttl_choice=idle_ttl_choice)
    if deadline_runtime_share not in (None, "measured"):
        counted = variants.parse_runtime_share(deadline_runtime_share)
        cfg = variants.with_trigger(cfg, name, deadline_runtime_share=counted)
    if margin is not None and margin not in variants.MEASURED:
        cfg = variants.with_margin(cfg, name, *variants.parse_margin(margin))
    return cfg


def _duration(option: str, text: str) -> timedelta:
    try:
        return parse_duration(text)
    except DurationError as e:
        raise ValueError(f"{option}: {e}") from None

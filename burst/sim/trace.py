"""Job traces for the policy simulator: read a trace CSV and turn its rows into simulated jobs.

The first step of `burst simulate` (simulate.py replays what this returns). A trace row has
`job_id, submit_time, duration_s, gpus` and optionally `user` or `queue`; real traces carry no
deadlines, teams or GPU types, so this module derives them by documented, seeded rules:

- **Deadline**: `submit + max(slack x duration, duration + allowance)`, with `slack` drawn per job
  by the slack rule (`uniform:LO:HI`, the default `uniform:1.5:4`, or `fixed:X`) and `allowance`
  54 minutes (`DEADLINE_ALLOWANCE_S`: a 30 minute safety margin plus twice the slowest cloud's
  default provisioning estimate, Azure's 12 minutes), so that every job could still meet its
  deadline on a cloud when it arrives, and a short job may queue a little before it has to burst.
  The deadlines depend on the trace and the seed alone: every configuration and policy replays
  the same ones.
- **Team**: the user (else the queue, else the job id) hashed onto the namespaces the policy selects,
  so each team's jobs fall under the policy and its budgets as they would in the cluster.
- **Pods**: jobs of up to 8 GPUs are one pod; larger ones are split into pods of at most 8 GPUs
  (a 128-GPU Philly job is 16 pods of 8), as distributed training jobs are.
- Fractional GPU pods (Alibaba's `gpu_milli < 1000`) are rounded up to one whole GPU.
- **GPU product**: with one product on-prem, a job asks for none (it runs on any GPU node, as a
  trace job names none); with several (`--onprem V100:32,T4:16`), each asks for one, drawn with
  odds in proportion to each product's GPUs among those whose nodes can hold its pods, by a hash
  of the job id and the seed, and waits for that product's nodes (and bursts to the GPUs the
  policy allows in its place).
- **On-prem capacity**, when not given: 0.8 x the trace's mean GPU demand (GPU-seconds over the
  submit span), rounded up to whole 8-GPU nodes (and never smaller than the largest job): less than
  the offered load, so that without bursting the queue grows, and bursting has real work to do.
"""

from __future__ import annotations

import csv
import hashlib
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from burst.decide.cluster import largest_product

DEADLINE_ALLOWANCE_S = 54 * 60

NODE_GPUS = 8  # GPUs per on-prem node and most per pod
DEFAULT_SLACK = "uniform:1.5:4"
ONPREM_FACTOR = 0.8


class TraceError(ValueError):
    """A trace or a rule that cannot be read; the message names the file, line and column."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, in seconds from the trace's start."""

    job_id: str
    submit: int
    duration: int
    gpus: int
    owner: str  # user, queue or job id: what the team is derived from


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job with everything the trace lacks: deadline, team, pod shape."""

    job_id: str
    submit: int
    duration: int
    gpus: int
    pods: int
    gpus_per_pod: int
    deadline: int
    team: str


# Beyond these a row is a corrupt or hostile file, not a job: a replay of it would run for ever.
TEN_YEARS_S = 10 * 365 * 24 * 3600  # a trace spans months; no job runs for years
MOST_GPUS = 100_000  # more than any one cluster has


def read(path: Path) -> list[TraceJob]:
    """The rows of a trace CSV, sorted by submit time (then id), with clear errors."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror}") from exc
    with handle:
        reader = csv.DictReader(handle)
        missing = {"job_id", "submit_time", "duration_s", "gpus"} - set(reader.fieldnames or ())
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(sorted(missing))}")
        jobs = [_row(path, reader.line_num, row) for row in reader]
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    if not jobs:
        raise TraceError(f"{path}: no jobs")
    return jobs


def _row(path: Path, line: int, row: dict[str, str]) -> TraceJob:
    def number(column: str, least: int, most: int) -> int:
        text = (row.get(column) or "").strip()
        try:
            value = int(float(text))
        except (ValueError, OverflowError):  # "ten", "nan", "inf"
            raise TraceError(f"{path}:{line}: {column}: not a number: {text!r}") from None
        if not least <= value <= most:
            raise TraceError(f"{path}:{line}: {column}: {value} is not within {least}..{most}")
        return value

    owner = (row.get("user") or row.get("queue") or "").strip() or row["job_id"]
    return TraceJob(
        row["job_id"],
        number("submit_time", 0, TEN_YEARS_S),
        number("duration_s", 1, TEN_YEARS_S),
        number("gpus", 1, MOST_GPUS),  # fractional GPUs (gpu_milli) are whole GPUs here
        owner,
    )


def slack_rule(text: str) -> tuple[float, float]:
    """`uniform:LO:HI` or `fixed:X` as the (low, high) range slack is drawn from."""
    kind, _, rest = text.partition(":")
    try:
        values = [float(v) for v in rest.split(":")] if rest else []
    except ValueError:
        values = []
    if kind == "fixed" and len(values) == 1 and values[0] >= 1:
        return values[0], values[0]
    if kind == "uniform" and len(values) == 2 and 1 <= values[0] <= values[1]:
        return values[0], values[1]
    raise TraceError(
        f"--deadline-slack: {text!r}: expected uniform:LO:HI or fixed:X with 1 <= LO <= HI"
    )


def _team(owner: str, teams: Sequence[str]) -> str:
    digest = hashlib.blake2b(owner.encode(), digest_size=4).digest()
    return teams[int.from_bytes(digest, "big") % len(teams)]


def derive(
    jobs: Iterable[TraceJob],
    *,
    teams: Sequence[str],
    allowance_s: int = DEADLINE_ALLOWANCE_S,
    slack: tuple[float, float],
    seed: int,
) -> list[SimJob]:
    """Deadlines, teams and pod shapes for every job; the same seed gives the same jobs."""
    rng = random.Random(seed)  # noqa: S311 (simulation, not security)
    low, high = slack
    out = []
    for j in jobs:
        factor = rng.uniform(low, high)
        pods = math.ceil(j.gpus / NODE_GPUS)
        deadline = j.submit + max(math.ceil(factor * j.duration), j.duration + allowance_s)
        out.append(
            SimJob(
                j.job_id,
                j.submit,
                j.duration,
                j.gpus,
                pods,
                math.ceil(j.gpus / pods),
                deadline,
                _team(j.owner, teams),
            )
        )
    return out


def products_asked(
    jobs: Sequence[SimJob], onprem: Mapping[str, int], seed: int
) -> list[str | None]:
    """The GPU product each job asks for: none with one product on-prem; with several, one drawn
    with odds in proportion to each product's GPUs, among those whose nodes can hold its pods,
    by a hash of the job id and the seed."""
    if len(onprem) < 2:
        return [None] * len(jobs)
    largest = largest_product(onprem)
    assert largest is not None  # two products or more
    out: list[str | None] = []
    for j in jobs:
        fit = {
            p: g
            for p, g in sorted(onprem.items())
            if min(g, NODE_GPUS) >= j.gpus_per_pod and g >= j.gpus
        } or {largest: 1}
        digest = hashlib.blake2b(f"{seed}:{j.job_id}".encode(), digest_size=8).digest()
        draw = int.from_bytes(digest, "big") % sum(fit.values())
        for product, gpus in fit.items():
            if draw < gpus:
                out.append(product)
                break
            draw -= gpus
    return out


def onprem_gpus(jobs: Sequence[TraceJob], factor: float = ONPREM_FACTOR) -> int:
    """The documented default size of the on-prem cluster for a trace, in whole 8-GPU nodes."""
    span = max(1, jobs[-1].submit - jobs[0].submit)
    mean_demand = sum(j.gpus * j.duration for j in jobs) / span
    largest = max(j.gpus for j in jobs)
    nodes = math.ceil(max(factor * mean_demand, largest) / NODE_GPUS)
    return nodes * NODE_GPUS


def onprem_spec(text: str) -> dict[str, int]:
    """`--onprem "V100:32,T4:16"` as GPUs per product."""
    out: dict[str, int] = {}
    for part in text.split(","):
        product, _, count = part.strip().partition(":")
        if not product or not count.isdigit() or int(count) <= 0:
            raise TraceError(f"--onprem: {part.strip()!r}: expected PRODUCT:GPUS, e.g. V100:32")
        out[product] = out.get(product, 0) + int(count)
    return out

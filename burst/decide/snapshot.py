"""The JSON form of a Snapshot and of a Plan: what `burst plan` reads and prints.

Admins and tests write snapshots by hand (docs/snapshot.example.json), the service can dump the
one it planned with, and docs/snapshot.schema.json documents the format; all three come from the
dataclasses in model.py through pydantic, so they cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError

from burst.model import Plan, Snapshot

_SNAPSHOT = TypeAdapter(Snapshot)
_PLAN = TypeAdapter(Plan)


class SnapshotError(ValueError):
    pass


# Times a snapshot may hold: the decision adds runtimes and provisioning to them, and a deadline
# in year 1 or 9999 ran past what datetime holds (OverflowError) instead of being refused.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
LONGEST = timedelta(days=3650)  # a runtime or a wait beyond ten years is an error, not a plan


def load_snapshot(text: str | bytes) -> Snapshot:
    """Parse and validate a snapshot; errors name the JSON path of each problem."""
    try:
        snapshot = _SNAPSHOT.validate_json(text, strict=False)
    except ValidationError as exc:
        lines = [
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise SnapshotError("\n".join(lines)) from None
    problems = list(_out_of_range(snapshot))
    if problems:
        raise SnapshotError("\n".join(problems))
    return snapshot


def _out_of_range(s: Snapshot) -> Iterator[str]:
    """What the types admit but no cluster has: negative counts, times out of any calendar."""

    def when(path: str, at: datetime | None) -> Iterator[str]:
        if at is not None and not EARLIEST <= at <= LATEST:
            yield f"{path}: {at.isoformat()} is outside {EARLIEST.year}-{LATEST.year}"

    yield from when("taken_at", s.taken_at)
    for accelerator, gpus in s.onprem.capacity.items():
        if gpus < 0:
            yield f"onprem.capacity.{accelerator}: {gpus} GPUs cannot be negative"
    on_nodes: dict[str, int] = {}
    for i, n in enumerate(s.onprem.nodes):
        if n.gpus < 0:
            yield f"onprem.nodes.{i}.gpus: {n.gpus} GPUs cannot be negative"
        on_nodes[n.accelerator] = on_nodes.get(n.accelerator, 0) + n.gpus
    for accelerator, gpus in sorted(on_nodes.items()):
        if s.onprem.capacity.get(accelerator) != gpus:
            yield (
                f"onprem.nodes: {gpus} {accelerator} GPUs on the nodes, but onprem.capacity "
                f"says {s.onprem.capacity.get(accelerator, 0)}"
            )
    for i, r in enumerate(s.onprem.running):
        if r.gpus < 0:
            yield f"onprem.running.{i}.gpus: {r.gpus} cannot be negative"
        yield from when(f"onprem.running.{i}.expected_end", r.expected_end)
    for i, w in enumerate(s.workloads):
        path = f"workloads.{i}"
        if w.gpus_per_pod < 0 or w.pods < 1:
            yield f"{path}: {w.pods} pod(s) of {w.gpus_per_pod} GPU(s): pods >= 1, GPUs >= 0"
        if w.cpu_per_pod < 0 or w.memory_gib_per_pod < 0:
            yield f"{path}: CPU and memory per pod cannot be negative"
        for name in ("created", "pending_since", "deadline"):
            yield from when(f"{path}.{name}", getattr(w, name))
        if w.expected_runtime is not None and not timedelta(0) <= w.expected_runtime <= LONGEST:
            yield f"{path}.expected_runtime: {w.expected_runtime} is outside 0 to {LONGEST.days} days"
    for i, p in enumerate(s.pools):
        if p.nodes < 0 or any(g < 0 for g in p.free_gpus):
            yield f"pools.{i}: node and free GPU counts cannot be negative"
        yield from when(f"pools.{i}.created", p.created)


def dump_snapshot(snapshot: Snapshot) -> str:
    return _SNAPSHOT.dump_json(snapshot, indent=2).decode()


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data: `actions` and `skips`, each with `reason` and `estimated_cost`."""
    data: dict[str, Any] = _PLAN.dump_python(plan, mode="json")
    return data


def snapshot_schema() -> str:
    return json.dumps(_SNAPSHOT.json_schema(), indent=2, sort_keys=True) + "\n"

"""The JSON form of a Snapshot and of a Plan: what `burst plan` reads and prints.

Admins and tests write snapshots by hand (docs/snapshot.example.json), the service can dump the
one it planned with, and docs/snapshot.schema.json documents the format; all three come from the
dataclasses in model.py through pydantic, so they cannot drift apart.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError

from burst.model import Plan, Snapshot

_SNAPSHOT = TypeAdapter(Snapshot)
_PLAN = TypeAdapter(Plan)


class SnapshotError(ValueError):
    pass


def load_snapshot(text: str | bytes) -> Snapshot:
    """Parse and validate a snapshot; errors name the JSON path of each problem."""
    try:
        return _SNAPSHOT.validate_json(text, strict=False)
    except ValidationError as exc:
        lines = [
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise SnapshotError("\n".join(lines)) from None


def dump_snapshot(snapshot: Snapshot) -> str:
    return _SNAPSHOT.dump_json(snapshot, indent=2).decode()


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data: `actions` and `skips`, each with `reason` and `estimated_cost`."""
    data: dict[str, Any] = _PLAN.dump_python(plan, mode="json")
    return data


def snapshot_schema() -> str:
    return json.dumps(_SNAPSHOT.json_schema(), indent=2, sort_keys=True) + "\n"

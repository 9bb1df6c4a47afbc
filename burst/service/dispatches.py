"""The dispatch rows the remote steps (remote.py) work from: each in one query with its workload and
pool, as ORM rows where a step writes them, or as plain columns for the follow step, which reads
tens of thousands a pass and writes the few that changed."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst.store.tables import Dispatch as DispatchRow
from burst.store.tables import Pool, Workload


def joined(s: Session, state: str) -> list[tuple[DispatchRow, Workload, Pool]]:
    """The dispatches in `state` with their workloads and pools, in one query."""
    rows = s.execute(
        select(DispatchRow, Workload, Pool)
        .join(Workload, Workload.id == DispatchRow.workload_id)
        .join(Pool, Pool.id == DispatchRow.pool_id)
        .where(DispatchRow.state == state)
        .order_by(DispatchRow.id)
    ).all()
    return [(d, w, p) for d, w, p in rows]


class Followed(NamedTuple):
    """A dispatched copy as a steady pass needs it: plain columns, no ORM objects."""

    id: int
    workload_id: int
    target: str
    remote_namespace: str
    remote_name: str
    state_reason: str | None
    failures_at_run: int | None
    updated_at: datetime
    uid: str
    kind: str
    namespace: str
    name: str
    pool: str
    pool_state: str
    pool_capacity: str


def followed(s: Session) -> list[Followed]:
    """Every dispatched copy with its workload and pool, in one query of plain columns (tens of
    thousands of ORM objects a pass cost more than the query)."""
    rows = s.execute(
        select(
            DispatchRow.id,
            DispatchRow.workload_id,
            DispatchRow.target,
            DispatchRow.remote_namespace,
            DispatchRow.remote_name,
            DispatchRow.state_reason,
            DispatchRow.failures_at_run,
            DispatchRow.updated_at,
            Workload.uid,
            Workload.kind,
            Workload.namespace,
            Workload.name,
            Pool.name,
            Pool.state,
            Pool.capacity,
        )
        .join(Workload, Workload.id == DispatchRow.workload_id)
        .join(Pool, Pool.id == DispatchRow.pool_id)
        .where(DispatchRow.state == "dispatched")
        .order_by(DispatchRow.id)
    )
    return [Followed._make(row) for row in rows]


def load(s: Session, f: Followed) -> tuple[DispatchRow, Workload]:
    """The rows of a copy that changed state, to write to."""
    d, w = s.get(DispatchRow, f.id), s.get(Workload, f.workload_id)
    assert d is not None and w is not None
    return d, w

"""The ledger's hash chain: every row carries a SHA-256 over the row before it and its own
fields, so a row changed or removed around the database's append-only triggers shows
(`burst ledger verify`). ledger.py appends through `append`, holding the ledger's lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from burst.store.tables import LedgerEntry

# Chained in this order; a row's hash covers them and the hash of the row before it.
HASHED = (
    "idempotency_key",
    "kind",
    "posted_at",
    "period_start",
    "period_end",
    "pool",
    "workload_uid",
    "namespace",
    "team",
    "policy",
    "provider",
    "region",
    "gpu_seconds",
    "amount_micros",
    "currency",
    "unit_price_micros",
    "corrects_id",
    "note",
)


def chain_hash(previous: str, row: Mapping[str, Any]) -> str:
    """The row's hash: SHA-256 over the previous row's hash and the row's HASHED fields."""
    parts = [previous]
    for name in HASHED:
        value = row.get(name)
        parts.append(value.isoformat() if isinstance(value, datetime) else str(value))
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def append(session: Session, rows: list[dict[str, Any]]) -> int:
    """Insert rows at the end of the chain (the caller holds LEDGER_LOCK)."""
    if not rows:
        return 0
    previous = (
        session.scalar(
            select(LedgerEntry.row_hash)
            .where(LedgerEntry.row_hash.is_not(None))
            .order_by(LedgerEntry.id.desc())
            .limit(1)
        )
        or ""
    )
    for row in rows:
        row["row_hash"] = previous = chain_hash(previous, row)
    session.execute(insert(LedgerEntry), rows)
    return len(rows)


@dataclass(frozen=True)
class Broken:
    row_id: int
    why: str


def verify(session: Session) -> tuple[int, list[Broken]]:
    """Recompute the chain over every row, in order: (rows checked, where it breaks). A row
    edited in place fails its own hash; a row removed breaks the link of the row after it."""
    previous, last_id, checked, broken = "", 0, 0, []
    query = select(LedgerEntry).order_by(LedgerEntry.id).execution_options(yield_per=2000)
    for row in session.scalars(query):
        checked += 1
        gap = row.id - last_id > 1
        last_id = row.id
        if row.row_hash is None:  # posted before the chain existed
            continue
        values = {name: getattr(row, name) for name in HASHED}
        if chain_hash(previous, values) != row.row_hash:
            why = (
                "does not follow the row before it: rows before it were removed"
                if gap and checked > 1
                else "was changed after it was posted (or the row before it was)"
            )
            broken.append(Broken(row.id, why))
        previous = row.row_hash
    return checked, broken

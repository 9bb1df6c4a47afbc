"""Reconcile the ledger with a cloud's bill: match, correct, and list what burst does not know.

Parsers read each cloud's billing export as documented: AWS Cost and Usage Report (legacy CSV:
`lineItem/...`, `resourceTags/user:...` columns), the GCP billing export (`usage_start_time`,
`cost`, `currency`, `labels` as JSON), and Azure cost details (`Date`, `CostInBillingCurrency`,
`BillingCurrencyCode`, `Tags`). Lines are attributed to burst's pools by their tags (burst's own
pool tag, or the managed service's node-pool tag), summed per pool and hour, and compared with the
ledger. A difference is recorded as a correction row (ledger.correct), so a second run finds
everything matched; a line of no known pool is reported as unknown.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst.amounts import Money
from burst.clock import Clock
from burst.model import FLAT_TAG_POOL
from burst.money.ledger import correct
from burst.store.tables import LedgerEntry

Cloud = Literal["aws", "gcp", "azure"]
TOLERANCE_MICROS = 10_000  # a cent: bills round, the ledger does not


@dataclass(frozen=True)
class BillLine:
    pool: str | None  # burst's pool name, None when the line carries no pool tag
    hour: datetime
    amount: Money
    description: str


def _hour(text: str) -> datetime:
    value = text.strip().replace("Z", "+00:00")
    if len(value) == 10:  # a date only (Azure's daily rows)
        value += "T00:00:00+00:00"
    parsed = datetime.fromisoformat(value.replace(" UTC", "+00:00"))
    parsed = parsed.replace(tzinfo=parsed.tzinfo or UTC).astimezone(UTC)
    return parsed.replace(minute=0, second=0, microsecond=0)


def parse_aws(text: str) -> list[BillLine]:
    lines = []
    for row in csv.DictReader(io.StringIO(text)):
        pool = (
            row.get("resourceTags/user:burst.dev/pool")
            or row.get("resourceTags/user:eks:nodegroup-name")
            or None
        )
        lines.append(
            BillLine(
                pool,
                _hour(row["lineItem/UsageStartDate"]),
                Money.of(
                    Decimal(row["lineItem/UnblendedCost"]).quantize(Decimal("0.000001")),
                    row.get("lineItem/CurrencyCode") or "USD",
                ),
                f"{row.get('lineItem/UsageType', '')} {row.get('lineItem/ResourceId', '')}".strip(),
            )
        )
    return lines


def parse_gcp(text: str, pool_names: Mapping[str, str] | None = None) -> list[BillLine]:
    """`pool_names` maps GKE node pool names back to burst's (they may be shortened)."""
    lines = []
    for row in csv.DictReader(io.StringIO(text)):
        labels = {item["key"]: item["value"] for item in json.loads(row.get("labels") or "[]")}
        pool = labels.get(FLAT_TAG_POOL)
        if pool is None and "goog-k8s-node-pool-name" in labels:
            pool = (pool_names or {}).get(
                labels["goog-k8s-node-pool-name"], labels["goog-k8s-node-pool-name"]
            )
        lines.append(
            BillLine(
                pool,
                _hour(row["usage_start_time"]),
                Money.of(Decimal(row["cost"]).quantize(Decimal("0.000001")), row["currency"]),
                row.get("sku.description", ""),
            )
        )
    return lines


def parse_azure(text: str) -> list[BillLine]:
    lines = []
    for row in csv.DictReader(io.StringIO(text)):
        raw = (row.get("Tags") or "").strip()
        tags = json.loads(raw if raw.startswith("{") else "{" + raw + "}") if raw else {}
        lines.append(
            BillLine(
                tags.get(FLAT_TAG_POOL),
                _hour(row["Date"]),
                Money.of(
                    Decimal(row["CostInBillingCurrency"]).quantize(Decimal("0.000001")),
                    row["BillingCurrencyCode"],
                ),
                f"{row.get('MeterCategory', '')} {row.get('ResourceId', '')}".strip(),
            )
        )
    return lines


@dataclass
class Outcome:
    matched: list[tuple[str, datetime, Money]] = field(default_factory=list)
    differs: list[tuple[str, datetime, Money, Money]] = field(
        default_factory=list
    )  # pool, hour, bill, ledger
    unknown: list[BillLine] = field(default_factory=list)
    corrections: int = 0


def reconcile(
    session: Session, lines: Iterable[BillLine], clock: Clock, *, day_granularity: bool = False
) -> Outcome:
    """Compare bill and ledger per pool and hour (or day, for daily bills); correct differences."""

    def bucket(t: datetime) -> datetime:
        return t.replace(hour=0) if day_granularity else t

    billed: dict[tuple[str, datetime], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    outcome = Outcome()
    known = set(session.scalars(select(LedgerEntry.pool).distinct()))
    for line in lines:
        if line.pool is None or line.pool not in known:
            outcome.unknown.append(line)
            continue
        billed[(line.pool, bucket(line.hour))][line.amount.currency] += line.amount.micros
    for (pool, when), amounts in sorted(billed.items()):
        rows = [
            r
            for r in session.scalars(
                select(LedgerEntry).where(LedgerEntry.pool == pool).order_by(LedgerEntry.id)
            )
            if bucket(r.period_start) == when
        ]
        ours: dict[str, int] = defaultdict(int)
        for r in rows:
            ours[r.currency] += r.amount_micros
        for currency, bill_micros in sorted(amounts.items()):
            bill, ledger_amount = (
                Money(bill_micros, currency),
                Money(ours.get(currency, 0), currency),
            )
            if abs(bill.micros - ledger_amount.micros) <= TOLERANCE_MICROS:
                outcome.matched.append((pool, when, bill))
                continue
            outcome.differs.append((pool, when, bill, ledger_amount))
            anchor = next(
                (r for r in reversed(rows) if r.currency == currency and r.kind != "correction"),
                None,
            )
            if anchor is not None:
                correct(
                    session,
                    anchor.id,
                    bill - ledger_amount,
                    f"reconciled with the bill for {pool} {when:%Y-%m-%d %H}:00",
                    clock,
                )
                outcome.corrections += 1
    return outcome


def parse(cloud: Cloud, text: str, pool_names: Mapping[str, str] | None = None) -> list[BillLine]:
    if cloud == "gcp":
        return parse_gcp(text, pool_names)
    return parse_aws(text) if cloud == "aws" else parse_azure(text)

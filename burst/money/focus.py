"""The ledger as FinOps FOCUS 1.2 rows, for finance tools to load as they load a cloud's export.

`focus_row()` maps one ledger row to FOCUS columns (pure); `export()` streams a period's rows to CSV
or Parquet without holding them in memory. The mapping, column by column (FOCUS_Spec
`specification/columns`, v1.2):
- costs: BilledCost = EffectiveCost = ListCost = ContractedCost = the row's amount (burst charges
  at the price it recorded; bills' discounts arrive through reconciliation as corrections);
- ChargeCategory Usage for usage, idle and overhead; Adjustment for corrections, with ChargeClass
  Correction when the correction sits in another billing period than the row it corrects;
- ChargePeriodStart/End the row's hour (end exclusive); BillingPeriod the calendar month (UTC);
- PricingCategory Standard (on demand) or Dynamic (spot); quantities in GPU-hours;
- ProviderName and PublisherName the cloud, InvoiceIssuerName burst (the ledger issues the charge),
  BillingAccountId burst's installation, SubAccountId the cloud account billed (AWS account, GCP
  project, Azure subscription); the team is a tag;
- ResourceId the node pool, SkuId the instance type, RegionId and AvailabilityZone where it ran;
- Tags a JSON object of burst-prefixed keys (FOCUS requires a provider prefix on provider keys).
Date/times are `YYYY-MM-DDTHH:mm:ssZ`; numbers plain decimals; nulls are empty cells in CSV.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from burst.store.tables import LedgerEntry

COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingAccountId",
    "BillingAccountName",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "ContractedUnitPrice",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "ServiceName",
    "ServiceCategory",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "RegionId",
    "RegionName",
    "AvailabilityZone",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
)
MONEY = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost")
DECIMALS = (*MONEY, "PricingQuantity", "ListUnitPrice", "ContractedUnitPrice", "ConsumedQuantity")
TIMES = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")
PROVIDERS = {"aws": "AWS", "gcp": "Google Cloud", "azure": "Microsoft"}
SERVICES = {
    "aws": "Amazon Elastic Compute Cloud",
    "gcp": "Compute Engine",
    "azure": "Virtual Machines",
}


def _month(at: datetime) -> tuple[datetime, datetime]:
    start = at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start, end


def focus_row(
    e: LedgerEntry, installation: str, corrected_start: datetime | None = None
) -> dict[str, Any]:
    """One ledger row as FOCUS columns (pure): Decimals, datetimes, strings or None."""
    amount = Decimal(e.amount_micros) / 1_000_000
    hours = (Decimal(e.gpu_seconds) / 3600).quantize(Decimal("1e-12"))
    unit = (amount / hours).quantize(Decimal("0.000001")) if hours else None
    correction = e.kind == "correction"
    billing_start, billing_end = _month(e.period_start)
    tags = {
        "burst.dev/kind": e.kind,
        "burst.dev/team": e.team,
        "burst.dev/policy": e.policy,
        "burst.dev/namespace": e.namespace,
        "burst.dev/job": e.workload_name or e.workload_uid,
        "burst.dev/pool": e.pool,
    }
    return {
        **dict.fromkeys(MONEY, amount),
        "BillingCurrency": e.currency,
        "BillingAccountId": installation,
        "BillingAccountName": installation,
        "BillingPeriodStart": billing_start,
        "BillingPeriodEnd": billing_end,
        "ChargePeriodStart": e.period_start,
        "ChargePeriodEnd": e.period_end,
        "ChargeCategory": "Adjustment" if correction else "Usage",
        "ChargeClass": (
            "Correction"
            if correction
            and corrected_start is not None
            and _month(corrected_start)[0] != billing_start
            else None
        ),
        "ChargeDescription": (
            e.note
            if correction and e.note
            else f"{e.kind} of {e.workload_name or e.team} on {e.pool or 'a pool'}"
        ),
        "ChargeFrequency": "Usage-Based",
        "PricingCategory": None
        if correction
        else ("Dynamic" if e.capacity == "spot" else "Standard"),
        "PricingQuantity": None if correction else hours,
        "PricingUnit": None if correction else "GPU-Hours",
        "ListUnitPrice": unit,
        "ContractedUnitPrice": unit,
        "ConsumedQuantity": None if correction else hours,
        "ConsumedUnit": None if correction else "GPU-Hours",
        "ProviderName": PROVIDERS.get(e.provider or "", e.provider or "burst"),
        "PublisherName": PROVIDERS.get(e.provider or "", e.provider or "burst"),
        "InvoiceIssuerName": "burst",
        "ServiceName": SERVICES.get(e.provider or "", "GPU node pools"),
        "ServiceCategory": "Compute",
        "ResourceId": e.pool,
        "ResourceName": e.pool,
        "ResourceType": "Node Pool" if e.pool else None,
        "RegionId": e.region,
        "RegionName": e.region,
        "AvailabilityZone": e.zone,
        "SkuId": e.instance_type,
        "SkuPriceId": f"{e.instance_type}:{e.capacity}" if e.instance_type else None,
        "SubAccountId": e.account,
        "SubAccountName": e.account,
        "Tags": json.dumps({k: v for k, v in tags.items() if v is not None}, sort_keys=True),
    }


def rows(
    session: Session, start: datetime, end: datetime, installation: str
) -> Iterator[dict[str, Any]]:
    """The period's ledger rows as FOCUS rows, read in batches."""
    corrected = aliased(LedgerEntry)
    query = (
        select(LedgerEntry, corrected.period_start)
        .outerjoin(corrected, corrected.id == LedgerEntry.corrects_id)
        .where(LedgerEntry.period_start >= start, LedgerEntry.period_start < end)
        .order_by(LedgerEntry.id)
        .execution_options(yield_per=5000)
    )
    for entry, corrected_start in session.execute(query):
        yield focus_row(entry, installation, corrected_start)


def _text(name: str, value: Any) -> str:
    if value is None:
        return ""  # FOCUS null: an empty cell
    if name in TIMES:
        return str(value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value else "0"
    return str(value)


def write_csv(path: Path, focus_rows: Iterator[Mapping[str, Any]]) -> int:
    count = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\r\n")
        writer.writerow(COLUMNS)
        for row in focus_rows:
            writer.writerow([_text(c, row[c]) for c in COLUMNS])
            count += 1
    return count


def write_parquet(path: Path, focus_rows: Iterator[Mapping[str, Any]]) -> int:
    """Typed columns: decimal(38,12) for amounts and quantities, UTC timestamps, strings."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = []
    for c in COLUMNS:
        if c in DECIMALS:
            kind: Any = pa.decimal128(38, 12)
        elif c in TIMES:
            kind = pa.timestamp("s", tz="UTC")
        else:
            kind = pa.string()
        fields.append(pa.field(c, kind))
    schema = pa.schema(fields)
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[Mapping[str, Any]] = []
        for row in focus_rows:
            batch.append(row)
            if len(batch) == 50_000:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        if batch or not count:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count

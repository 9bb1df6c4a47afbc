"""`burst export`: the ledger in FinOps FOCUS 1.2 columns, as CSV and as Parquet, checked against
the specification's column rules (FOCUS_Spec v1.2 `specification/columns` and `attributes`):
the Mandatory columns present, allowed values, date/time and number formats, key-value Tags, and
the costs adding up to the ledger."""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from burst.clock import FakeClock
from burst.money import ledger
from burst.store import database
from burst.store.tables import LedgerEntry
from tests.conftest import burst_cli
from tests.ledger_scenario import ACCOUNTS, build_ledger

MANDATORY = {
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
    "BillingAccountId", "BillingAccountName", "BillingPeriodStart", "BillingPeriodEnd",
    "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "InvoiceIssuerName",
    "ServiceName", "ServiceCategory",
}  # fmt: skip
NOT_NULL = {
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
    "BillingAccountId", "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
    "ChargePeriodEnd", "ChargeCategory", "ProviderName", "PublisherName", "InvoiceIssuerName",
    "ServiceName", "ServiceCategory", "ChargeFrequency",
}  # fmt: skip
DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")  # attributes/datetime_format
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")  # attributes/numeric_format: no +, no separators
ALLOWED = {
    "ChargeCategory": {"Usage", "Purchase", "Tax", "Credit", "Adjustment"},
    "ChargeClass": {"Correction", None},
    "ChargeFrequency": {"One-Time", "Recurring", "Usage-Based"},
    "PricingCategory": {"Standard", "Dynamic", "Committed", "Other", None},
    "ServiceCategory": {"Compute"},
}


def check_focus(rows: list[dict[str, Any]]) -> None:
    assert rows and set(rows[0]) >= MANDATORY
    for row in rows:
        for column in NOT_NULL:
            assert row[column] not in (None, ""), (column, row)
        for column, allowed in ALLOWED.items():
            assert (row[column] or None) in allowed, (column, row[column])
        for column in (
            "BillingPeriodStart",
            "BillingPeriodEnd",
            "ChargePeriodStart",
            "ChargePeriodEnd",
        ):
            assert DATETIME.fullmatch(row[column]), (column, row[column])
        assert row["ChargePeriodStart"] < row["ChargePeriodEnd"]  # end exclusive, after start
        assert row["BillingPeriodStart"] <= row["ChargePeriodStart"] < row["BillingPeriodEnd"]
        for column in (
            "BilledCost",
            "EffectiveCost",
            "ListCost",
            "ContractedCost",
            "PricingQuantity",
        ):
            if row[column]:
                assert NUMBER.fullmatch(row[column]), (column, row[column])
        tags = json.loads(row["Tags"])  # attributes/key_value_format: an object of scalars
        assert isinstance(tags, dict) and all(k.startswith("burst.dev/") for k in tags)
        assert all(isinstance(v, str | int | float | bool) or v is None for v in tags.values())
        if row["ChargeCategory"] == "Usage":  # PricingCategory not null on usage rows
            assert row["PricingCategory"] in ("Standard", "Dynamic")


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'burst.db'}"
    build_ledger(url)
    return url


def _ledger_total(url: str) -> Decimal:
    engine = database.make_engine(url)
    with database.sessions(engine)() as s:
        total = s.scalar(select(func.sum(LedgerEntry.amount_micros)))
    engine.dispose()
    return Decimal(total) / 1_000_000


def test_the_csv_meets_focus_and_adds_up_to_the_ledger(ledger_url: str, tmp_path: Path) -> None:
    out = tmp_path / "focus.csv"
    result = burst_cli("export", "--period", "2026-11", "--out", str(out), "--url", ledger_url)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
    check_focus(rows)
    assert sum(Decimal(r["BilledCost"]) for r in rows) == _ledger_total(ledger_url)
    assert {r["ProviderName"] for r in rows} == {"AWS", "Google Cloud", "Microsoft"}
    assert {r["PricingCategory"] for r in rows} == {"Standard", "Dynamic"}  # GCP's pool is spot
    # SubAccountId is the account the cloud billed, as in the clouds' own FOCUS exports.
    assert {(r["ProviderName"], r["SubAccountId"]) for r in rows} == {
        ("AWS", ACCOUNTS["aws"]),
        ("Google Cloud", ACCOUNTS["gcp"]),
        ("Microsoft", ACCOUNTS["azure"]),
    }
    assert f"wrote {out}: {len(rows)} FOCUS row(s)" in result.stderr


def test_the_parquet_has_typed_columns_and_the_same_rows(ledger_url: str, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_out, parquet_out = tmp_path / "f.csv", tmp_path / "f.parquet"
    for out in (csv_out, parquet_out):
        assert (
            burst_cli(
                "export", "--period", "2026-11", "-o", str(out), "--url", ledger_url
            ).returncode
            == 0
        )
    table = pq.read_table(parquet_out)
    assert pa.types.is_decimal(table.schema.field("BilledCost").type)
    assert pa.types.is_timestamp(table.schema.field("ChargePeriodStart").type)
    assert table.num_rows == len(list(csv.DictReader(io.StringIO(csv_out.read_text(), newline=""))))
    billed = sum(table.column("BilledCost").to_pylist())
    assert billed == _ledger_total(ledger_url)


def test_a_correction_of_a_closed_month_is_a_correction_in_focus(
    ledger_url: str, tmp_path: Path
) -> None:
    engine = database.make_engine(ledger_url)
    with database.sessions(engine).begin() as s:
        first = s.scalar(select(LedgerEntry).order_by(LedgerEntry.id).limit(1))
        assert first is not None
        december = first.period_start.replace(month=12, day=2)
        from burst.amounts import Money

        ledger.correct(
            s,
            first.id,
            Money.of("-1.25", first.currency),
            "reconciled with the bill",
            FakeClock(december),
            period=(december, december.replace(hour=december.hour + 1)),
        )
    engine.dispose()
    out = tmp_path / "dec.csv"
    assert (
        burst_cli("export", "--period", "2026-12", "-o", str(out), "--url", ledger_url).returncode
        == 0
    )
    (row,) = list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
    check_focus([row])
    assert (row["ChargeCategory"], row["ChargeClass"], row["BilledCost"]) == (
        "Adjustment",
        "Correction",
        "-1.25",
    )

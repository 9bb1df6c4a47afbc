"""`burst reconcile` with sample bills in each cloud's documented column format."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from burst.store import database
from burst.store.tables import LedgerEntry
from providers.gcp import cloud_name
from tests.conftest import ROOT
from tests.ledger_scenario import build_ledger


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'burst.db'}"
    build_ledger(url)
    return url


def ledger_hours(url: str, pool: str, daily: bool = False) -> dict[datetime, Decimal]:
    engine = database.make_engine(url)
    out: dict[datetime, Decimal] = defaultdict(Decimal)
    with database.sessions(engine)() as s:
        for row in s.scalars(select(LedgerEntry).where(LedgerEntry.pool == pool)):
            when = row.period_start.replace(hour=0) if daily else row.period_start
            out[when] += Decimal(row.amount_micros) / 1_000_000
    engine.dispose()
    return dict(sorted(out.items()))


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buffer.getvalue())
    return path


def reconcile(url: str, provider: str, bill: Path) -> dict:  # type: ignore[type-arg]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst",
            "reconcile",
            "--provider",
            provider,
            "--file",
            str(bill),
            "--url",
            url,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def check(url: str, provider: str, bill: Path, hours: int, pool: str) -> None:
    first = reconcile(url, provider, bill)
    assert len(first["matched"]) == hours - 1
    (diff,) = first["differs"]
    assert diff["pool"] == pool and Decimal(diff["bill"].split()[0]) - Decimal(
        diff["ledger"].split()[0]
    ) == Decimal("1.5")
    assert len(first["unknown"]) == 1 and first["corrections"] == 1
    again = reconcile(url, provider, bill)  # the correction makes the ledger agree with the bill
    assert len(again["matched"]) == hours and again["differs"] == [] and again["corrections"] == 0


def test_aws_cost_and_usage_report(ledger_url: str, tmp_path: Path) -> None:
    pool = "aws-euc1-p3-8xlarge-1"
    hours = ledger_hours(ledger_url, pool)
    rows = []
    for i, (hour, amount) in enumerate(hours.items()):
        billed = amount + (Decimal("1.5") if i == 1 else 0)  # one hour billed at a different price
        half = (billed / 2).quantize(Decimal("0.000001"))
        for node, part in (
            ("i-0a1", half),
            ("i-0b2", billed - half),
        ):  # two instances of the node group
            rows.append(
                [
                    f"line-{i}-{node}",
                    hour.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "AmazonEC2",
                    "EUC1-BoxUsage:p3.8xlarge",
                    node,
                    "1",
                    str(part),
                    "USD",
                    pool,
                    pool,
                ]
            )
    rows.append(
        [
            "line-x",
            "2026-11-02T09:00:00Z",
            "AmazonEC2",
            "EUC1-BoxUsage:t3.large",
            "i-0ff",
            "1",
            "0.0960",
            "USD",
            "",
            "",
        ]
    )
    bill = write_csv(
        tmp_path / "cur.csv",
        [
            "identity/LineItemId",
            "lineItem/UsageStartDate",
            "lineItem/ProductCode",
            "lineItem/UsageType",
            "lineItem/ResourceId",
            "lineItem/UsageAmount",
            "lineItem/UnblendedCost",
            "lineItem/CurrencyCode",
            "resourceTags/user:burst.dev/pool",
            "resourceTags/user:eks:nodegroup-name",
        ],
        rows,
    )
    check(ledger_url, "aws", bill, len(hours), pool)


def test_gcp_billing_export(ledger_url: str, tmp_path: Path) -> None:
    pool = "gcp-euw4-n1-standard-8-1"
    hours = ledger_hours(ledger_url, pool)
    rows = []
    for i, (hour, amount) in enumerate(hours.items()):
        billed = amount + (Decimal("1.5") if i == 0 else 0)
        labels = json.dumps([{"key": "goog-k8s-node-pool-name", "value": cloud_name(pool)}])
        rows.append(
            [
                "Compute Engine",
                "Nvidia Tesla T4 GPU running in Netherlands",
                hour.isoformat(),
                str(billed),
                "USD",
                labels,
            ]
        )
    rows.append(
        [
            "Cloud Storage",
            "Standard Storage Netherlands",
            "2026-11-03T10:00:00+00:00",
            "0.42",
            "USD",
            "[]",
        ]
    )
    bill = write_csv(
        tmp_path / "gcp.csv",
        [
            "service.description",
            "sku.description",
            "usage_start_time",
            "cost",
            "currency",
            "labels",
        ],
        rows,
    )
    check(ledger_url, "gcp", bill, len(hours), pool)


def test_azure_cost_details(ledger_url: str, tmp_path: Path) -> None:
    pool = "azure-eastus-standard-nc24ads-a100-v4-1"
    days = ledger_hours(ledger_url, pool, daily=True)
    rows = []
    for i, (day, amount) in enumerate(days.items()):
        billed = amount + (Decimal("1.5") if i == 0 else 0)
        rows.append(
            [
                day.strftime("%Y-%m-%d"),
                "Virtual Machines",
                "/subscriptions/s/resourceGroups/mc_rg/providers/"
                "Microsoft.Compute/virtualMachineScaleSets/aks-b1234",
                str(billed),
                "USD",
                json.dumps({"burst-pool": pool, "burst-owner": "site-a"})[1:-1],
            ]
        )
    rows.append(["2026-11-05", "Bandwidth", "/subscriptions/s/x", "0.12", "USD", ""])
    bill = write_csv(
        tmp_path / "azure.csv",
        [
            "Date",
            "MeterCategory",
            "ResourceId",
            "CostInBillingCurrency",
            "BillingCurrencyCode",
            "Tags",
        ],
        rows,
    )
    first = reconcile(ledger_url, "azure", bill)
    assert first["corrections"] == 1 and len(first["unknown"]) == 1
    assert len(first["matched"]) + len(first["differs"]) == len(days)
    again = reconcile(ledger_url, "azure", bill)
    assert again["differs"] == [] and again["corrections"] == 0


def test_a_file_that_is_not_a_bill_is_a_clear_error(ledger_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst",
            "reconcile",
            "--provider",
            "aws",
            "--file",
            str(bad),
            "--url",
            ledger_url,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 1 and "is not a billing export of aws" in result.stderr

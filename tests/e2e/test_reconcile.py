"""`burst reconcile` against each billing export format, written with the columns, line types,
time formats and tag forms its provider publishes (sources beside each header), over a ledger
produced by the simulated cloud."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from burst.amounts import Money
from burst.store import database
from burst.store.tables import LedgerEntry
from providers.azure import cloud_name as aks_name
from providers.gcp import cloud_name as gke_name
from tests.conftest import burst_cli
from tests.ledger_scenario import build_ledger

AWS_POOL = "aws-euc1-p3-8xlarge-1"
GCP_POOL = "gcp-euw4-n1-standard-8-1"
AZURE_POOL = "azure-eastus-standard-nc24ads-a100-v4-1"

# AWS CUR 2.0: docs.aws.amazon.com/cur/latest/userguide/table-dictionary-cur2.html (hourly,
# INCLUDE_RESOURCES); resource_tags is a map, written in CSV as a JSON object.
CUR2 = (
    "identity_line_item_id,identity_time_interval,bill_bill_type,bill_payer_account_id,"
    "bill_billing_period_start_date,bill_billing_period_end_date,line_item_usage_account_id,"
    "line_item_line_item_type,line_item_usage_start_date,line_item_usage_end_date,"
    "line_item_product_code,line_item_usage_type,line_item_operation,line_item_availability_zone,"
    "line_item_resource_id,line_item_usage_amount,line_item_currency_code,line_item_unblended_rate,"
    "line_item_unblended_cost,line_item_net_unblended_cost,line_item_line_item_description,"
    "product_instance_type,product_region_code,product_sku,pricing_unit,pricing_term,"
    "savings_plan_savings_plan_effective_cost,reservation_effective_cost,resource_tags"
).split(",")
# Legacy CUR: aws-cur-user-guide, Lineitem-columns.md; one resourceTags/ column per tag.
CUR = (
    "identity/LineItemId,identity/TimeInterval,bill/BillType,bill/PayerAccountId,"
    "bill/BillingPeriodStartDate,bill/BillingPeriodEndDate,lineItem/UsageAccountId,"
    "lineItem/LineItemType,lineItem/UsageStartDate,lineItem/UsageEndDate,lineItem/ProductCode,"
    "lineItem/UsageType,lineItem/Operation,lineItem/AvailabilityZone,lineItem/ResourceId,"
    "lineItem/UsageAmount,lineItem/CurrencyCode,lineItem/UnblendedRate,lineItem/UnblendedCost,"
    "lineItem/LineItemDescription,lineItem/TaxType,product/instanceType,product/region,"
    "pricing/term,pricing/unit,resourceTags/aws:eks:cluster-name,"
    "resourceTags/user:eks:nodegroup-name,resourceTags/user:team"
).split(",")
# GCP billing export, flattened to CSV (BigQuery cannot export nested rows as CSV: the arrays
# are JSON cells): cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/standard-usage
GCP_CSV = (
    "billing_account_id,service_description,sku_id,sku_description,usage_start_time,"
    "usage_end_time,project_id,location_region,location_zone,cost,currency,usage_amount,"
    "usage_unit,cost_type,invoice_month,labels,system_labels,credits"
).split(",")
# Azure EA cost details, version 2024-08-01 (learn.microsoft.com/azure/cost-management-billing/
# dataset-schema/cost-usage-details-ea); dates MM/DD/YYYY in exports; Tags without braces.
EA = (
    "InvoiceSectionName,AccountName,AccountOwnerId,SubscriptionId,SubscriptionName,ResourceGroup,"
    "ResourceLocation,Date,ProductName,MeterCategory,MeterSubCategory,MeterId,MeterName,"
    "MeterRegion,UnitOfMeasure,Quantity,EffectivePrice,CostInBillingCurrency,CostCenter,"
    "ConsumedService,ResourceId,Tags,OfferId,AdditionalInfo,ServiceInfo1,ServiceInfo2,"
    "ResourceName,ReservationId,ReservationName,UnitPrice,ProductOrderId,ProductOrderName,Term,"
    "PublisherType,PublisherName,ChargeType,Frequency,PricingModel,AvailabilityZone,"
    "BillingAccountId,BillingAccountName,BillingCurrencyCode,BillingPeriodStartDate,"
    "BillingPeriodEndDate,BillingProfileId,BillingProfileName,InvoiceSectionId,"
    "IsAzureCreditEligible,PartNumber,PayGPrice,PlanName,ServiceFamily,CostAllocationRuleName,"
    "benefitId,benefitName,AccountId,ResourceLocationNormalized"
).split(",")
# Azure MCA cost details, version 2023-12-01-preview (cost-usage-details-mca): camelCase with a
# few PascalCase columns.
MCA = (
    "invoiceId,previousInvoiceId,billingAccountId,billingAccountName,billingProfileId,"
    "billingProfileName,invoiceSectionId,invoiceSectionName,resellerName,resellerMpnId,costCenter,"
    "billingPeriodEndDate,billingPeriodStartDate,servicePeriodEndDate,servicePeriodStartDate,date,"
    "serviceFamily,productOrderId,productOrderName,consumedService,meterId,meterName,meterCategory,"
    "meterSubCategory,meterRegion,ProductId,ProductName,SubscriptionId,subscriptionName,"
    "publisherType,publisherId,publisherName,resourceGroupName,ResourceId,resourceLocation,"
    "location,effectivePrice,quantity,unitOfMeasure,chargeType,billingCurrency,pricingCurrency,"
    "costInBillingCurrency,costInPricingCurrency,costInUsd,paygCostInBillingCurrency,paygCostInUsd,"
    "exchangeRatePricingToBilling,exchangeRateDate,isAzureCreditEligible,serviceInfo1,serviceInfo2,"
    "additionalInfo,tags,PayGPrice,frequency,term,reservationId,reservationName,pricingModel,"
    "unitPrice,costAllocationRuleName,benefitId,benefitName,provider"
).split(",")
# FOCUS 1.2: FOCUS_Spec specification/columns (Mandatory, and the Conditional ones a
# reconciliation needs); Tags a JSON object.
FOCUS = (
    "BilledCost,EffectiveCost,ListCost,ContractedCost,BillingCurrency,BillingAccountId,"
    "BillingAccountName,BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,"
    "ChargeCategory,ChargeClass,ChargeDescription,ChargeFrequency,PricingCategory,PricingQuantity,"
    "PricingUnit,ProviderName,PublisherName,InvoiceIssuerName,ServiceName,ServiceCategory,"
    "ResourceId,RegionId,SkuId,Tags"
).split(",")


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'burst.db'}"
    build_ledger(url)
    return url


def ledger_spans(url: str, pool: str, daily: bool = False) -> dict[datetime, Decimal]:
    engine = database.make_engine(url)
    out: dict[datetime, Decimal] = defaultdict(Decimal)
    with database.sessions(engine)() as s:
        for row in s.scalars(select(LedgerEntry).where(LedgerEntry.pool == pool)):
            when = row.period_start.replace(hour=0) if daily else row.period_start
            out[when] += Decimal(row.amount_micros) / 1_000_000
    engine.dispose()
    return dict(sorted(out.items()))


def write_csv(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, restval="")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())
    return path


def reconcile(url: str, bill: Path, *extra: str) -> dict[str, Any]:
    result = burst_cli("reconcile", "--file", str(bill), "--url", url, "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def check(url: str, bill: Path, spans: int, pool: str, *extra: str) -> dict[str, Any]:
    """The first span was billed 1.50 more; the second was left out of the bill; a foreign line
    and a tax line. Corrected once; a second run matches everything billed."""
    first = reconcile(url, bill, *extra)
    assert len(first["matched"]) == spans - 2, first
    (diff,) = first["differs"]
    assert diff["pool"] == pool
    assert Decimal(diff["bill"].split()[0]) - Decimal(diff["ledger"].split()[0]) == Decimal("1.5")
    assert first["corrections"] >= 1
    assert [m["pool"] for m in first["missing_from_bill"]] == [pool]
    assert len(first["unknown"]) == 1
    assert {b["type"] for b in first["beside"]} >= {"tax"}
    again = reconcile(url, bill, *extra)
    assert len(again["matched"]) == spans - 1 and again["differs"] == []
    assert again["corrections"] == 0
    return first


def billed(spans: dict[datetime, Decimal]) -> list[tuple[datetime, Decimal]]:
    """All spans but the second, the first one 1.50 dearer."""
    items = list(spans.items())
    return [(t, a + (Decimal("1.5") if i == 0 else 0)) for i, (t, a) in enumerate(items) if i != 1]


def test_aws_cur_2(ledger_url: str, tmp_path: Path) -> None:
    spans = ledger_spans(ledger_url, AWS_POOL)
    rows = []
    tags = json.dumps({"user_eks_nodegroup_name": AWS_POOL, "aws_eks_cluster_name": "burst"})
    for hour, amount in billed(spans):
        half = (amount / 2).quantize(Decimal("0.000001"))
        for node, part in (("i-0a1", half), ("i-0b2", amount - half)):  # two nodes
            rows.append(
                {
                    "line_item_line_item_type": "Usage",
                    "line_item_usage_start_date": z(hour),
                    "line_item_usage_end_date": z(hour + timedelta(hours=1)),
                    "line_item_usage_type": "EUC1-BoxUsage:p3.8xlarge",
                    "line_item_resource_id": node,
                    "line_item_currency_code": "USD",
                    "line_item_unblended_cost": str(part),
                    "resource_tags": tags,
                }
            )
    first = next(iter(spans))
    rows += [
        {  # someone else's instance
            "line_item_line_item_type": "Usage",
            "line_item_usage_start_date": z(first),
            "line_item_usage_type": "EUC1-BoxUsage:t3.large",
            "line_item_currency_code": "USD",
            "line_item_unblended_cost": "0.0960",
            "resource_tags": "{}",
        },
        {  # tax has no resource
            "line_item_line_item_type": "Tax",
            "line_item_usage_start_date": "2026-11-01T00:00:00.000Z",
            "line_item_currency_code": "USD",
            "line_item_unblended_cost": "4.20",
        },
    ]
    check(ledger_url, write_csv(tmp_path / "cur2.csv", CUR2, rows), len(spans), AWS_POOL)


def test_aws_legacy_cur(ledger_url: str, tmp_path: Path) -> None:
    spans = ledger_spans(ledger_url, AWS_POOL)
    rows = [
        {
            "lineItem/LineItemType": "Usage",
            "lineItem/UsageStartDate": z(hour),
            "lineItem/UsageEndDate": z(hour + timedelta(hours=1)),
            "lineItem/UsageType": "EUC1-BoxUsage:p3.8xlarge",
            "lineItem/ResourceId": "i-0a1",
            "lineItem/CurrencyCode": "USD",
            "lineItem/UnblendedCost": str(amount),
            "resourceTags/aws:eks:cluster-name": "burst",
            "resourceTags/user:eks:nodegroup-name": AWS_POOL,
        }
        for hour, amount in billed(spans)
    ]
    rows += [
        {
            "lineItem/LineItemType": "Usage",
            "lineItem/UsageStartDate": z(next(iter(spans))),
            "lineItem/CurrencyCode": "USD",
            "lineItem/UnblendedCost": "0.0960",
            "resourceTags/user:team": "web",
        },
        {
            "lineItem/LineItemType": "Tax",
            "lineItem/UsageStartDate": "2026-11-01T00:00:00Z",
            "lineItem/CurrencyCode": "USD",
            "lineItem/UnblendedCost": "4.20",
            "lineItem/TaxType": "VAT",
        },
    ]
    check(ledger_url, write_csv(tmp_path / "cur.csv", CUR, rows), len(spans), AWS_POOL)


def _gcp_records(spans: dict[datetime, Decimal], credit: bool) -> list[dict[str, Any]]:
    labels = [
        {"key": "goog-k8s-cluster-name", "value": "burst"},
        {"key": "goog-k8s-node-pool-name", "value": gke_name(GCP_POOL)},
    ]
    out: list[dict[str, Any]] = []
    for i, (hour, amount) in enumerate(billed(spans)):
        # A committed-use credit on the first hour: the list cost is 0.50 higher, the credit
        # takes 0.50 back; the hour's net is still the ledger's plus 1.50.
        cost = amount + (Decimal("0.5") if credit and i == 0 else 0)
        credits = [
            {
                "name": "Committed use discount: GPU",
                "amount": -0.5,
                "type": "COMMITTED_USAGE_DISCOUNT",
            }
        ]
        out.append(
            {
                "service": {"description": "Compute Engine"},
                "sku": {"description": "Nvidia Tesla T4 GPU running in Netherlands"},
                "usage_start_time": hour.strftime("%Y-%m-%d %H:%M:%S UTC"),
                "usage_end_time": (hour + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S UTC"),
                "labels": labels,
                "cost": float(cost),
                "currency": "USD",
                "cost_type": "regular",
                "credits": credits if credit and i == 0 else [],
                "invoice": {"month": "202611"},
            }
        )
    first = next(iter(spans))
    out.append(
        {
            "sku": {"description": "Standard Storage Netherlands"},
            "usage_start_time": first.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "labels": [],
            "cost": 0.42,
            "currency": "USD",
            "cost_type": "regular",
            "credits": [],
        }
    )
    out.append(
        {
            "sku": {"description": "Tax"},
            "usage_start_time": "2026-11-01 00:00:00 UTC",
            "labels": [],
            "cost": 3.10,
            "currency": "USD",
            "cost_type": "tax",
            "credits": [],
        }
    )
    return out


def test_gcp_export_with_a_credit_as_json_lines(ledger_url: str, tmp_path: Path) -> None:
    """A committed-use credit nested in its usage line was ignored: the hour looked 0.50 dearer
    than it was, and the correction said so."""
    spans = ledger_spans(ledger_url, GCP_POOL)
    bill = tmp_path / "gcp.jsonl"
    bill.write_text("\n".join(json.dumps(r) for r in _gcp_records(spans, credit=True)) + "\n")
    november = burst_cli("report", "--url", ledger_url, "--period", "2026-11", "-f", "json")
    check(ledger_url, bill, len(spans), GCP_POOL)
    after = burst_cli("report", "--url", ledger_url, "--period", "2026-11", "-f", "json")
    # The corrections are posted in the period they are made: November's report stands.
    assert json.loads(after.stdout)["total"] == json.loads(november.stdout)["total"]


def test_gcp_export_flattened_to_csv(ledger_url: str, tmp_path: Path) -> None:
    spans = ledger_spans(ledger_url, GCP_POOL)
    rows = [
        {
            "sku_description": r["sku"]["description"],
            "usage_start_time": r["usage_start_time"],
            "usage_end_time": r.get("usage_end_time", ""),
            "cost": str(r["cost"]),
            "currency": r["currency"],
            "cost_type": r["cost_type"],
            "labels": json.dumps(r["labels"]),
            "credits": json.dumps(r["credits"]),
        }
        for r in _gcp_records(spans, credit=False)
    ]
    check(ledger_url, write_csv(tmp_path / "gcp.csv", GCP_CSV, rows), len(spans), GCP_POOL)


def _azure_rows(
    spans: dict[datetime, Decimal], date: Callable[[datetime], str], tags: Callable[[], str]
) -> list[dict[str, str]]:
    rows = [
        {
            "Date": date(day),
            "MeterCategory": "Virtual Machines",
            "MeterSubCategory": "NCads A100 v4",
            "ResourceId": "/subscriptions/s/resourceGroups/mc_rg/providers/"
            "Microsoft.Compute/virtualMachineScaleSets/aks-" + aks_name(AZURE_POOL),
            "CostInBillingCurrency": str(amount),
            "BillingCurrencyCode": "USD",
            "ChargeType": "Usage",
            "Tags": tags(),
        }
        for day, amount in billed(spans)
    ]
    first = next(iter(spans))
    rows += [
        {
            "Date": date(first),
            "MeterCategory": "Bandwidth",
            "CostInBillingCurrency": "0.12",
            "BillingCurrencyCode": "USD",
            "ChargeType": "Usage",
        },
        {
            "Date": date(first),
            "MeterCategory": "Tax",
            "CostInBillingCurrency": "1.00",
            "BillingCurrencyCode": "USD",
            "ChargeType": "Tax",
        },
    ]
    return rows


def test_azure_ea_with_us_dates_and_tags_without_braces(ledger_url: str, tmp_path: Path) -> None:
    """EA exports write 11/05/2026 and tags without their braces: a bare KeyError before."""
    spans = ledger_spans(ledger_url, AZURE_POOL, daily=True)
    assert len(spans) >= 3, "the scenario's Azure pool spans at least three days"
    tags = json.dumps({"aks-managed-poolName": aks_name(AZURE_POOL), "team": "cms"})[1:-1]
    rows = _azure_rows(spans, lambda d: d.strftime("%m/%d/%Y"), lambda: tags)
    check(ledger_url, write_csv(tmp_path / "ea.csv", EA, rows), len(spans), AZURE_POOL)


def test_azure_mca(ledger_url: str, tmp_path: Path) -> None:
    spans = ledger_spans(ledger_url, AZURE_POOL, daily=True)
    tags = json.dumps({"burst-pool": AZURE_POOL, "burst-owner": "site-a"})
    rows = [
        {
            ("costInBillingCurrency" if k == "CostInBillingCurrency" else k[0].lower() + k[1:]): v
            for k, v in r.items()
            if k != "BillingCurrencyCode"
        }
        | {"billingCurrency": "USD", "ResourceId": r.get("ResourceId", "")}
        for r in _azure_rows(spans, lambda d: d.strftime("%m/%d/%Y"), lambda: tags)
    ]
    for r in rows:
        r.pop("resourceId", None)
    check(ledger_url, write_csv(tmp_path / "mca.csv", MCA, rows), len(spans), AZURE_POOL)


def test_focus(ledger_url: str, tmp_path: Path) -> None:
    spans = ledger_spans(ledger_url, AWS_POOL)
    rows = [
        {
            "BilledCost": str(amount),
            "EffectiveCost": str(amount),
            "ListCost": str(amount),
            "ContractedCost": str(amount),
            "BillingCurrency": "USD",
            "BillingAccountId": "123456789012",
            "BillingPeriodStart": "2026-11-01T00:00:00Z",
            "BillingPeriodEnd": "2026-12-01T00:00:00Z",
            "ChargePeriodStart": z(hour),
            "ChargePeriodEnd": z(hour + timedelta(hours=1)),
            "ChargeCategory": "Usage",
            "ChargeDescription": "p3.8xlarge On Demand",
            "ChargeFrequency": "Usage-Based",
            "PricingCategory": "Standard",
            "ProviderName": "AWS",
            "PublisherName": "AWS",
            "InvoiceIssuerName": "AWS",
            "ServiceName": "Amazon Elastic Compute Cloud",
            "ServiceCategory": "Compute",
            "ResourceId": "i-0a1",
            "RegionId": "eu-central-1",
            "Tags": json.dumps({"user:eks:nodegroup-name": AWS_POOL}),
        }
        for hour, amount in billed(spans)
    ]
    base = {k: rows[0][k] for k in ("BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd")}
    rows += [
        base | {"BilledCost": "0.0960", "ChargeCategory": "Usage", "Tags": "{}"},
        base | {"BilledCost": "4.20", "ChargeCategory": "Tax"},
    ]
    check(ledger_url, write_csv(tmp_path / "focus.csv", FOCUS, rows), len(spans), AWS_POOL)


def test_a_bill_in_another_currency_is_converted_at_the_configured_rate_or_refused(
    ledger_url: str, tmp_path: Path
) -> None:
    """A bill in EUR printed "corrected by 0.32 EUR" and wrote nothing, on every run."""
    spans = ledger_spans(ledger_url, AWS_POOL)
    rows = [
        {
            "lineItem/UsageStartDate": z(hour),
            "lineItem/CurrencyCode": "EUR",
            "lineItem/UnblendedCost": str((amount * Decimal("0.86")).quantize(Decimal("0.000001"))),
            "resourceTags/user:eks:nodegroup-name": AWS_POOL,
        }
        for hour, amount in spans.items()
    ]
    bill = write_csv(tmp_path / "eur.csv", CUR, rows)
    refused = burst_cli("reconcile", "--file", str(bill), "--url", ledger_url)
    assert refused.returncode == 1
    assert "the bill is in EUR and the ledger in USD: add usdExchangeRates.EUR" in refused.stderr
    done = reconcile(ledger_url, bill, "-c", "config")
    assert done["rates_per_usd"] == {"EUR": "0.86"}
    assert len(done["matched"]) == len(spans) and done["corrections"] == 0


def test_a_file_that_is_not_a_bill_is_a_clear_error(ledger_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    result = burst_cli("reconcile", "--provider", "aws", "--file", str(bad), "--url", ledger_url)
    assert result.returncode == 1 and "not a billing export burst knows" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    broken = tmp_path / "broken.csv"
    broken.write_text("lineItem/UsageStartDate,lineItem/UnblendedCost\nyesterday,1\n")
    result = burst_cli("reconcile", "--file", str(broken), "--url", ledger_url)
    assert result.returncode == 1 and "not a aws-cur export" in result.stderr


def test_each_line_is_converted_at_the_rate_of_its_own_day(ledger_url: str) -> None:
    """A bill across a change of rate: every line matches at its day's rate, none at one rate."""
    from burst.clock import FakeClock
    from burst.money import reconcile as matching
    from burst.money.bills import BillLine

    spans = ledger_spans(ledger_url, AZURE_POOL)
    days = sorted({t.date() for t in spans})
    assert len(days) >= 2, days  # the Azure job runs 50 hours
    change = days[1]

    def rates_at(at: datetime) -> dict[str, Decimal]:
        return {"EUR": Decimal("0.86") if at.date() < change else Decimal("0.92")}

    lines = [
        BillLine(
            AZURE_POOL,
            hour,
            hour + timedelta(hours=1),
            Money.of(str((amount * rates_at(hour)["EUR"]).quantize(Decimal("0.000001"))), "EUR"),
            "usage",
            "Standard_NC24ads_A100_v4",
        )
        for hour, amount in spans.items()
    ]
    engine = database.make_engine(ledger_url)
    try:
        with database.sessions(engine).begin() as s:
            outcome = matching.reconcile(s, lines, FakeClock(), rates_at)
        assert (len(outcome.matched), outcome.differs) == (len(spans), [])
        assert outcome.rates == {"EUR": [Decimal("0.86"), Decimal("0.92")]}
        with database.sessions(engine).begin() as s:  # at one rate, the later days differ
            one_rate = matching.reconcile(s, lines, FakeClock(), lambda _: {"EUR": Decimal("0.86")})
        assert {span[1].date() for span, _, _ in one_rate.differs} == set(days[1:])
    finally:
        engine.dispose()

"""Cloud bills as burst reads them: each export format's lines as BillLines (pure parsers).

Formats, each as its provider documents it (columns, line types, time formats, tags):
- `aws-cur2`: AWS CUR 2.0 (Data Exports): `line_item_*` columns, `resource_tags` a map
  (a JSON object in CSV; keys `user_...`/`aws_...`, or `user:...` as written by some tools);
- `aws-cur`: the legacy CUR: `lineItem/...` columns, one `resourceTags/user:<key>` column per tag;
- `gcp`: the Cloud Billing export: newline-delimited JSON as BigQuery exports it (timestamps
  `2026-11-01 03:00:00 UTC`, `labels` and `credits` arrays), or a CSV flattening of it with the
  arrays as JSON cells; credits are nested in their usage line, with negative amounts;
- `azure-ea` and `azure-mca`: Azure cost details (EA PascalCase, MCA camelCase, headers matched
  without regard to case), daily, `MM/DD/YYYY` dates in exports, ISO in the API; `Tags` a JSON
  object, with or without its braces;
- `focus`: FinOps FOCUS 1.0-1.2 from any provider: `BilledCost`, `ChargeCategory`, `Tags`.

Every line keeps its type apart: usage, discount, credit, refund, tax, or other (fees,
purchases, rounding). A line is burst's pool's when its tags say so: burst's own pool tag, or the
managed service's node-pool tag (EKS `eks:nodegroup-name`, GKE `goog-k8s-node-pool-name`, AKS
`aks-managed-poolName`), mapped back to burst's pool name by the caller.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from burst.amounts import Money
from burst.model import FLAT_TAG_POOL, TAG_POOL

BillFormat = Literal["aws-cur2", "aws-cur", "gcp", "azure-ea", "azure-mca", "focus"]
FORMATS: tuple[BillFormat, ...] = ("aws-cur2", "aws-cur", "gcp", "azure-ea", "azure-mca", "focus")
LineType = Literal["usage", "discount", "credit", "refund", "tax", "other"]
# Line types that change what a pool-hour cost; the rest are reported beside it.
POOL_COST: frozenset[LineType] = frozenset({"usage", "discount", "credit"})


class BillError(ValueError):
    """Not a bill of the format asked for, or a line that cannot be read; says which."""


@dataclass(frozen=True)
class BillLine:
    pool: str | None  # burst's pool, when the line's tags name one
    start: datetime
    end: datetime
    amount: Money
    type: LineType
    description: str


# -- values ----------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    """`2026-11-01T03:00:00Z`, `...00.000Z`, `2026-11-01 03:00:00 UTC`, `11/01/2026` (Azure
    exports: US month first) or `2026-11-01`; always UTC."""
    value = text.strip()
    if m := re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", value):
        return datetime(int(m[3]), int(m[1]), int(m[2]), tzinfo=UTC)
    value = value.replace(" UTC", "+00:00").replace("Z", "+00:00")
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=parsed.tzinfo or UTC).astimezone(UTC)


# No bill line comes near this; beyond it micro-units would pass the ledger's 64-bit integers
# (9.2e12 units) once a few are summed.
LARGEST_LINE = Decimal(10) ** 12


def _amount(text: str | float | None, currency: str) -> Money:
    try:
        value = Decimal(str(text).strip() or "0")
    except InvalidOperation:
        raise BillError(f"{text!r} is not an amount") from None
    if not value.is_finite() or abs(value) > LARGEST_LINE:
        raise BillError(f"{text!r} is not an amount a bill line can hold (at most 10^12)")
    return Money.of(value.quantize(Decimal("0.000001")), currency.strip() or "USD")


def _tags(text: str | None) -> dict[str, Any]:
    """A JSON object, also without its outer braces (Azure EA writes tags that way)."""
    raw = (text or "").strip()
    if not raw:
        return {}
    parsed = json.loads(raw if raw.startswith(("{", "[")) else "{" + raw + "}")
    if isinstance(parsed, list):  # [{"key": ..., "value": ...}] (GCP labels)
        return {item["key"]: item["value"] for item in parsed}
    return dict(parsed)


def _norm(key: str) -> str:
    """A tag key as CUR 2.0 and Athena spell it: lower case, `:` `-` `.` `/` as `_`."""
    return re.sub(r"[^a-z0-9]", "_", key.lower())


def pool_of(tags: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    """burst's pool from a line's tags: its own tag, else a managed node-pool tag through
    `names` (the managed service's pool name -> burst's)."""
    by_norm = {_norm(k): str(v) for k, v in tags.items()}
    for key in (TAG_POOL, FLAT_TAG_POOL):
        for spelled in (key, f"user:{key}", f"user_{_norm(key)}", _norm(key)):
            if _norm(spelled) in by_norm:
                return by_norm[_norm(spelled)]
    for key in (
        "eks:nodegroup-name",
        "goog-k8s-node-pool-name",
        "aks-managed-poolName",
        "poolName",
    ):
        for spelled in (key, f"user:{key}", f"aws:{key}"):
            found = by_norm.get(_norm(spelled))
            if found:
                return names.get(found, found)
    return None


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _need(row: Mapping[str, Any], *columns: str) -> None:
    missing = [c for c in columns if c not in row]
    if missing:
        raise BillError(f"no column {', '.join(missing)}")


# -- AWS -------------------------------------------------------------------------------------

_AWS_TYPES: Mapping[str, LineType] = {
    "Usage": "usage",
    "DiscountedUsage": "usage",
    "SavingsPlanCoveredUsage": "usage",
    "SavingsPlanNegation": "discount",
    "BundledDiscount": "discount",
    "Discount": "discount",
    "EdpDiscount": "discount",
    "PrivateRateDiscount": "discount",
    "Credit": "credit",
    "Refund": "refund",
    "Tax": "tax",
}


def parse_aws_cur2(text: str, names: Mapping[str, str]) -> list[BillLine]:
    out = []
    for row in _rows(text):
        _need(row, "line_item_usage_start_date", "line_item_unblended_cost")
        tags = _tags(row.get("resource_tags"))
        start = parse_time(row["line_item_usage_start_date"])
        out.append(
            BillLine(
                pool_of(tags, names),
                start,
                parse_time(row.get("line_item_usage_end_date") or "")
                if row.get("line_item_usage_end_date")
                else start + timedelta(hours=1),
                _amount(row["line_item_unblended_cost"], row.get("line_item_currency_code", "")),
                _AWS_TYPES.get(row.get("line_item_line_item_type") or "Usage", "other"),
                " ".join(
                    v
                    for v in (row.get("line_item_usage_type"), row.get("line_item_resource_id"))
                    if v
                ),
            )
        )
    return out


def parse_aws_cur(text: str, names: Mapping[str, str]) -> list[BillLine]:
    out = []
    for row in _rows(text):
        _need(row, "lineItem/UsageStartDate", "lineItem/UnblendedCost")
        tags = {
            k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("resourceTags/") and v
        }
        start = parse_time(row["lineItem/UsageStartDate"])
        end = row.get("lineItem/UsageEndDate")
        out.append(
            BillLine(
                pool_of(tags, names),
                start,
                parse_time(end) if end else start + timedelta(hours=1),
                _amount(row["lineItem/UnblendedCost"], row.get("lineItem/CurrencyCode", "")),
                _AWS_TYPES.get(row.get("lineItem/LineItemType") or "Usage", "other"),
                " ".join(
                    v for v in (row.get("lineItem/UsageType"), row.get("lineItem/ResourceId")) if v
                ),
            )
        )
    return out


# -- GCP -------------------------------------------------------------------------------------

_GCP_TYPES: Mapping[str, LineType] = {"regular": "usage", "tax": "tax"}


def _gcp_records(text: str) -> list[dict[str, Any]]:
    """Newline-delimited JSON (BigQuery's export of nested rows) or a flattened CSV whose
    array cells are JSON and whose nested names use `.` or `_`."""
    if text.lstrip().startswith("{"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    records = []
    for row in _rows(text):
        flat = {k.replace(".", "_"): v for k, v in row.items()}
        records.append(
            {
                "usage_start_time": flat.get("usage_start_time", ""),
                "usage_end_time": flat.get("usage_end_time", ""),
                "cost": flat.get("cost", ""),
                "currency": flat.get("currency", ""),
                "cost_type": flat.get("cost_type") or "regular",
                "labels": json.loads(flat.get("labels") or "[]"),
                "credits": json.loads(flat.get("credits") or "[]"),
                "sku": {"description": flat.get("sku_description", "")},
            }
        )
    return records


def parse_gcp(text: str, names: Mapping[str, str]) -> list[BillLine]:
    out = []
    for rec in _gcp_records(text):
        _need(rec, "usage_start_time", "cost", "currency")
        start = parse_time(rec["usage_start_time"])
        end = parse_time(rec["usage_end_time"]) if rec.get("usage_end_time") else start
        end = end if end > start else start + timedelta(hours=1)
        pool = pool_of(_tags(json.dumps(rec.get("labels") or [])), names)
        sku = (rec.get("sku") or {}).get("description", "")
        kind = _GCP_TYPES.get(str(rec.get("cost_type") or "regular").lower(), "other")
        out.append(BillLine(pool, start, end, _amount(rec["cost"], rec["currency"]), kind, sku))
        for credit in rec.get("credits") or []:  # nested in the usage line, negative
            out.append(
                BillLine(
                    pool,
                    start,
                    end,
                    _amount(credit.get("amount"), rec["currency"]),
                    "credit",
                    f"{credit.get('type', 'credit')}: {credit.get('name', '')}".strip(),
                )
            )
    return out


# -- Azure -----------------------------------------------------------------------------------

_AZURE_TYPES: Mapping[str, LineType] = {"usage": "usage", "refund": "refund", "tax": "tax"}


def _azure(text: str, names: Mapping[str, str], currency_columns: Iterable[str]) -> list[BillLine]:
    out = []
    for raw in _rows(text):
        row = {k.lower(): v for k, v in raw.items()}  # EA and MCA mix cases
        _need(row, "date", "costinbillingcurrency")
        currency = next((row[c] for c in currency_columns if row.get(c)), "")
        if not currency:
            raise BillError("no billing currency column (BillingCurrencyCode, billingCurrency)")
        day = parse_time(row["date"])
        out.append(
            BillLine(
                pool_of(_tags(row.get("tags")), names),
                day,
                day + timedelta(days=1),  # a whole day
                _amount(row["costinbillingcurrency"], currency),
                _AZURE_TYPES.get((row.get("chargetype") or "Usage").lower(), "other"),
                " ".join(v for v in (row.get("metercategory"), row.get("resourceid")) if v),
            )
        )
    return out


def parse_azure_ea(text: str, names: Mapping[str, str]) -> list[BillLine]:
    return _azure(text, names, ("billingcurrencycode", "billingcurrency", "currency"))


def parse_azure_mca(text: str, names: Mapping[str, str]) -> list[BillLine]:
    return _azure(text, names, ("billingcurrency", "billingcurrencycode"))


# -- FOCUS -----------------------------------------------------------------------------------

_FOCUS_TYPES: Mapping[str, LineType] = {"Usage": "usage", "Credit": "credit", "Tax": "tax"}


def parse_focus(text: str, names: Mapping[str, str]) -> list[BillLine]:
    out = []
    for row in _rows(text):
        _need(row, "BilledCost", "BillingCurrency", "ChargePeriodStart", "ChargeCategory")
        start = parse_time(row["ChargePeriodStart"])
        end = parse_time(row["ChargePeriodEnd"]) if row.get("ChargePeriodEnd") else start
        out.append(
            BillLine(
                pool_of(_tags(row.get("Tags")), names),
                start,
                end if end > start else start + timedelta(hours=1),
                _amount(row["BilledCost"], row["BillingCurrency"]),
                _FOCUS_TYPES.get(row["ChargeCategory"], "other"),
                " ".join(v for v in (row.get("ChargeDescription"), row.get("ResourceId")) if v),
            )
        )
    return out


PARSERS: Mapping[BillFormat, Callable[[str, Mapping[str, str]], list[BillLine]]] = {
    "aws-cur2": parse_aws_cur2,
    "aws-cur": parse_aws_cur,
    "gcp": parse_gcp,
    "azure-ea": parse_azure_ea,
    "azure-mca": parse_azure_mca,
    "focus": parse_focus,
}


def detect(text: str) -> BillFormat:
    """The format of an export, from its header (or its first JSON line)."""
    head = text.lstrip("\ufeff").lstrip()
    if head.startswith("{"):
        return "gcp"
    header = {h.strip().lower() for h in next(csv.reader(io.StringIO(head)), [])}
    if "billedcost" in header:
        return "focus"
    if "line_item_usage_start_date" in header:
        return "aws-cur2"
    if "lineitem/usagestartdate" in header:
        return "aws-cur"
    if "usage_start_time" in header:
        return "gcp"
    if "costinbillingcurrency" in header:
        return "azure-mca" if {"invoiceid", "billingcurrency"} & header else "azure-ea"
    raise BillError(
        "not a billing export burst knows (AWS CUR 2.0 or legacy CUR, the GCP billing export, "
        "Azure EA or MCA cost details, FOCUS): its header has none of their columns"
    )


def parse(text: str, names: Mapping[str, str], form: BillFormat | None = None) -> list[BillLine]:
    """The bill's lines; `names` maps managed node-pool names to burst's pool names."""
    chosen = form or detect(text)
    try:
        return PARSERS[chosen](text.lstrip("\ufeff"), names)
    except BillError as exc:
        raise BillError(f"not a {chosen} export: {exc}") from None
    except (KeyError, ValueError, TypeError) as exc:
        raise BillError(f"not a {chosen} export: {exc.__class__.__name__}: {exc}") from None

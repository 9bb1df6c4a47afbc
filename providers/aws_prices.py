"""AWS live prices: on-demand from the Price List API, spot from EC2's spot price history, over
the static catalog, which stays the last-known-good fallback. Pure parsers (`on_demand_filters`,
`on_demand_price`, `spot_prices`) and `AwsPrices`, which providers/aws.py uses for its offers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from burst.clock import Clock
from burst.model import Offer


def on_demand_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    """Price List API filters for Linux, shared-tenancy, no-software on-demand hours (pure)."""
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def on_demand_price(price_list: list[str]) -> str | None:
    """The USD hourly price in a GetProducts answer (each item is a JSON document), or None."""
    import json

    for item in price_list:
        product = json.loads(item)
        for term in (product.get("terms", {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                if dimension.get("unit") == "Hrs" and usd and float(usd) > 0:
                    return str(usd)
    return None


def spot_prices(history: list[Mapping[str, Any]]) -> dict[str, str]:
    """Highest current spot price per instance type over the region's zones (pure): a pool may
    land in any zone, so estimates must not undershoot."""
    latest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in history:
        key = (entry["InstanceType"], entry["AvailabilityZone"])
        if key not in latest or entry["Timestamp"] > latest[key]["Timestamp"]:
            latest[key] = entry
    best: dict[str, str] = {}
    for (instance_type, _), entry in latest.items():
        if instance_type not in best or float(entry["SpotPrice"]) > float(best[instance_type]):
            best[instance_type] = str(entry["SpotPrice"])
    return best


class AwsPrices:
    """Live AWS prices over the static catalog, which stays the last-known-good fallback.

    `refresh()` asks the Price List API (on-demand) and EC2 spot price history (spot) for the
    region's GPU instance types; if either fails, the offers it could not price keep their last
    known price, and the error is returned for the caller to report, never raised.
    """

    def __init__(
        self,
        region: str,
        static: Callable[[], list[Offer]],
        clock: Clock,
        *,
        pricing: Any = None,
        ec2: Any = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        pricing_endpoint_url: str | None = None,
    ) -> None:
        self.region, self._static, self._clock = region, static, clock
        self._pricing, self._ec2 = pricing, ec2
        self._profile, self._endpoint, self._pricing_endpoint = (
            profile,
            endpoint_url,
            pricing_endpoint_url,
        )
        self._known: dict[tuple[str, str], str] = {}  # (instance type, capacity) -> USD per hour

    def _clients(self) -> tuple[Any, Any]:
        if self._pricing is None or self._ec2 is None:
            import boto3
            from botocore.config import Config

            config = Config(retries={"max_attempts": 2, "mode": "standard"}, read_timeout=30)
            session = boto3.session.Session(profile_name=self._profile)
            # The Price List API answers from us-east-1 for every region.
            self._pricing = self._pricing or session.client(
                "pricing",
                region_name="us-east-1",
                endpoint_url=self._pricing_endpoint,
                config=config,
            )
            self._ec2 = self._ec2 or session.client(
                "ec2", region_name=self.region, endpoint_url=self._endpoint, config=config
            )
        return self._pricing, self._ec2

    def refresh(self) -> list[str]:
        """Fetch current prices; returns the problems met (empty when all went well)."""
        from botocore.exceptions import BotoCoreError, ClientError

        problems = []
        types = sorted(
            {
                o.instance_type
                for o in self._static()
                if o.cloud == "aws" and o.region == self.region
            }
        )
        try:
            pricing, ec2 = self._clients()
        except (BotoCoreError, ClientError) as exc:
            return [f"AWS prices: {exc.__class__.__name__}"]
        for instance_type in types:
            try:
                answer = pricing.get_products(
                    ServiceCode="AmazonEC2",
                    MaxResults=10,
                    Filters=on_demand_filters(instance_type, self.region),
                )
            except (BotoCoreError, ClientError) as exc:
                # The service is unwell: keep every last-known price rather than ask 50 more times.
                problems.append(f"on-demand prices (at {instance_type}): {error_code(exc)}")
                break
            price = on_demand_price(answer.get("PriceList") or [])
            if price is not None:
                self._known[(instance_type, "on-demand")] = price
        try:
            history: list[Mapping[str, Any]] = []
            paginator = ec2.get_paginator("describe_spot_price_history")
            for page in paginator.paginate(
                InstanceTypes=types, ProductDescriptions=["Linux/UNIX"], StartTime=self._clock.now()
            ):
                history += page.get("SpotPriceHistory") or []
            for instance_type, price in spot_prices(history).items():
                self._known[(instance_type, "spot")] = price
        except (BotoCoreError, ClientError) as exc:
            problems.append(f"spot prices: {error_code(exc)}")
        return problems

    def offers(self) -> list[Offer]:
        from dataclasses import replace

        from burst.amounts import Money

        out = []
        for o in self._static():
            if o.cloud != "aws" or o.region != self.region:
                continue
            live = self._known.get((o.instance_type, o.capacity))
            out.append(replace(o, hourly=Money.of(live, "USD"), price_source="live") if live else o)
        return out


def error_code(exc: Exception) -> str:
    """An AWS error as `Code` (never the request, which may carry signed headers)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or exc.__class__.__name__)
    return exc.__class__.__name__

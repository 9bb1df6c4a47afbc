"""Live AWS prices: the Price List API (a local fake) and EC2 spot price history (moto), with the
static catalog as last-known-good when either fails."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from burst.amounts import Money
from burst.clock import FakeClock
from burst.cloud import catalog
from providers.aws_prices import AwsPrices, spot_prices
from tests.fakes.pricing import PricingFake

REGION = "eu-central-1"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def prices(pricing_url: str, moto_url: str) -> AwsPrices:
    return AwsPrices(
        REGION,
        lambda: list(catalog.shipped()),
        FakeClock(),
        pricing_endpoint_url=pricing_url,
        endpoint_url=moto_url,
    )


def test_live_prices_replace_the_static_ones(aws_env: Any, moto_url: str) -> None:
    fake = PricingFake({("p3.2xlarge", REGION): "3.8250000000"})
    try:
        live = prices(fake.url, moto_url)
        assert live.refresh() == []
        by_key = {(o.instance_type, o.capacity): o for o in live.offers()}
        p3 = by_key[("p3.2xlarge", "on-demand")]
        assert p3.hourly == Money.of("3.825", "USD") and p3.price_source == "live"
        untouched = by_key[("g4dn.xlarge", "on-demand")]  # the fake has no price for it
        assert untouched.price_source == "catalog"
        # Spot: the highest of moto's current zone prices for the type.
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)
        history = ec2.describe_spot_price_history(
            InstanceTypes=["g4dn.xlarge"], ProductDescriptions=["Linux/UNIX"]
        )["SpotPriceHistory"]
        expected = spot_prices(history).get("g4dn.xlarge")
        if expected is not None:
            assert by_key[("g4dn.xlarge", "spot")].hourly == Money.of(expected, "USD")
    finally:
        fake.stop()


def test_a_failed_refresh_keeps_the_last_known_good_prices(aws_env: Any, moto_url: str) -> None:
    fake = PricingFake({("p3.2xlarge", REGION): "3.825"})
    try:
        live = prices(fake.url, moto_url)
        live.refresh()
        fake.down = True
        problems = live.refresh()
        assert problems == ["on-demand prices (at g4dn.12xlarge): ServiceUnavailableException"]
        p3 = next(
            o
            for o in live.offers()
            if o.instance_type == "p3.2xlarge" and o.capacity == "on-demand"
        )
        assert p3.hourly == Money.of("3.825", "USD")  # still the last live price
    finally:
        fake.stop()


def test_spot_prices_take_the_latest_per_zone_then_the_highest_zone() -> None:
    from datetime import UTC, datetime

    t1, t2 = datetime(2026, 11, 30, 8, tzinfo=UTC), datetime(2026, 11, 30, 9, tzinfo=UTC)
    history = [
        {
            "InstanceType": "p3.2xlarge",
            "AvailabilityZone": "a",
            "SpotPrice": "2.0",
            "Timestamp": t1,
        },
        {
            "InstanceType": "p3.2xlarge",
            "AvailabilityZone": "a",
            "SpotPrice": "1.0",
            "Timestamp": t2,
        },
        {
            "InstanceType": "p3.2xlarge",
            "AvailabilityZone": "b",
            "SpotPrice": "1.5",
            "Timestamp": t1,
        },
    ]
    assert spot_prices(history) == {"p3.2xlarge": "1.5"}

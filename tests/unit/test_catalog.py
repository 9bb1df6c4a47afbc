"""The price catalog on the real shipped data (an extract of the SkyPilot catalog)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from burst.amounts import Money
from burst.clock import FakeClock
from burst.cloud import catalog
from burst.config import CatalogOverrides, ExcludeRule, PriceOverride
from burst.model import Cloud, Offer
from tests.conftest import ROOT, SHARED

SHIPPED = catalog.shipped()


def _one(
    cloud: str,
    region: str,
    instance: str,
    capacity: str = "on-demand",
    accelerator: str | None = None,
    gpus: int | None = None,
) -> Offer:
    found = [
        o
        for o in SHIPPED
        if (o.cloud, o.region, o.instance_type, o.capacity) == (cloud, region, instance, capacity)
        and (accelerator is None or o.accelerator == accelerator)
        and (gpus is None or o.gpus == gpus)
    ]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.skipif(
    not (SHARED / "data" / "prices").is_dir(), reason="../shared/data/prices not here"
)
@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_shipped_prices_are_the_source_rows(cloud: str) -> None:
    source = (SHARED / "data" / "prices" / f"{cloud}.csv").read_text()
    shipped = (ROOT / "burst" / "data" / "prices" / f"{cloud}.csv").read_text()
    assert shipped == catalog.shipped_csv(cloud, source)  # type: ignore[arg-type]


def test_attribution_ships_with_the_data() -> None:
    text = (ROOT / "burst" / "data" / "prices" / "SOURCE.md").read_text()
    assert "skypilot-org/skypilot-catalog" in text


@pytest.mark.parametrize(
    ("region", "host", "accelerator", "gpus", "total"),
    [
        ("us-central1", "a2-highgpu-8g", "A100", 8, "29.38708"),
        ("us-central1", "n1-standard-4", "T4", 1, "0.54"),
        ("us-central1", "n1-highmem-8", "V100", 1, "2.95321"),
        ("us-central1", "g2-standard-4", "L4", 1, "0.70683"),
    ],
    ids=["8xA100-on-a2", "T4-on-n1-standard-4", "V100-on-n1-highmem-8", "L4-on-g2-standard-4"],
)
def test_gcp_price_is_host_plus_gpus(
    region: str, host: str, accelerator: str, gpus: int, total: str
) -> None:
    # The worked examples of SOURCE.md: host VM row + GPU row of the same zone.
    offer = _one("gcp", region, host, accelerator=accelerator, gpus=gpus)
    assert offer.hourly == Money.of(total, "USD")
    assert "us-central1-a" in offer.zones


def test_gcp_n1_hosts_respect_the_vcpu_limit_per_gpu_count() -> None:
    v100_hosts = {
        o.instance_type: o.vcpus
        for o in SHIPPED
        if o.cloud == "gcp" and o.accelerator == "V100" and o.gpus == 1
    }
    assert max(v100_hosts.values()) == 8  # 12 is the limit; n1 sizes go 8 -> 16
    assert "n1-standard-16" not in v100_hosts
    t4_hosts = {
        o.instance_type
        for o in SHIPPED
        if o.cloud == "gcp" and o.accelerator == "T4" and o.gpus == 4
    }
    assert "n1-standard-96" in t4_hosts


@pytest.mark.parametrize(
    ("cloud", "instance", "region", "price"),
    [
        ("aws", "p3.2xlarge", "us-east-1", "3.06"),
        ("gcp", "n1-standard-1", "us-central1", "2.5275"),
    ],
    ids=["aws-p3.2xlarge", "gcp-n1-standard-1-plus-V100"],
)
def test_cheapest_single_v100_on_demand_per_cloud(
    cloud: str, instance: str, region: str, price: str
) -> None:
    cheapest = SHIPPED.query(["V100"], gpus=1, capacity="on-demand", clouds=[cloud])  # type: ignore[list-item]
    assert (cheapest[0].instance_type, cheapest[0].region) == (instance, region)
    assert cheapest[0].hourly == Money.of(price, "USD")
    prices = [o.hourly.micros for o in cheapest]
    assert prices == sorted(prices)


def test_query_filters_compose() -> None:
    offers = SHIPPED.query(
        ["V100", "A100"],
        gpus=4,
        capacity="spot",
        clouds=["aws", "gcp"],
        min_vcpus=32,
        min_memory_gib=200,
    )
    assert offers
    for o in offers:
        assert o.accelerator in ("V100", "A100") and o.gpus == 4 and o.capacity == "spot"
        assert o.cloud in ("aws", "gcp") and o.vcpus >= 32 and o.memory_gib >= 200
    eu = SHIPPED.query(["T4"], regions={("aws", "eu-west-1")})
    assert {(o.cloud, o.region) for o in eu} == {("aws", "eu-west-1")}
    cheapest_t4 = SHIPPED.query(["T4"])[0]
    assert cheapest_t4 not in SHIPPED.query(["T4"], unavailable={cheapest_t4.key})


def test_aws_spot_price_is_the_highest_zone_price() -> None:
    # g4dn.xlarge in eu-central-1: spot 0.2674, 0.2670 and 0.2737 in its three zones (source rows).
    offer = _one("aws", "eu-central-1", "g4dn.xlarge", "spot")
    assert offer.hourly == Money.of("0.2737", "USD")
    assert offer.zones == ("euc1-az1", "euc1-az2", "euc1-az3")


@pytest.mark.parametrize(
    ("cloud", "instance", "why"),
    [
        ("aws", "g4ad.16xlarge", "AMD GPUs: no EKS accelerated AMI"),
        ("aws", "p2.xlarge", "needs NVIDIA driver 470"),
        ("azure", "Standard_NC6", "retired (K80/M60)"),
        ("azure", "Standard_NV24_Promo", "retired (K80/M60)"),
        ("azure", "Standard_NC6s_v3", "retired (NCv3)"),
        ("azure", "Standard_NV16as_v4", "AMD GPUs: not supported by AKS"),
        ("azure", "Standard_NV36ads_A10_v5", "GRID"),
        ("azure", "Standard_NV12s_v3", "GRID"),
    ],
)
def test_offers_the_managed_service_cannot_run_are_left_out(
    cloud: Cloud, instance: str, why: str
) -> None:
    assert (catalog.unrunnable(cloud, instance) or "").startswith(why)
    assert not [o for o in SHIPPED if o.instance_type == instance]


@pytest.mark.parametrize(
    ("cloud", "instance"),
    [
        ("aws", "g4dn.xlarge"),
        ("aws", "g5g.xlarge"),
        ("azure", "Standard_NC4as_T4_v3"),
        ("azure", "Standard_ND96asr_v4"),
        ("azure", "Standard_NC24ads_A100_v4"),
    ],
)
def test_nvidia_sizes_the_service_runs_stay(cloud: Cloud, instance: str) -> None:
    assert catalog.unrunnable(cloud, instance) is None
    assert [o for o in SHIPPED if o.instance_type == instance]


def test_offers_without_a_price_are_not_offered() -> None:
    # p5e.48xlarge has no on-demand price in the source (capacity blocks only).
    assert not [
        o for o in SHIPPED if o.instance_type == "p5e.48xlarge" and o.capacity == "on-demand"
    ]


def test_overrides_exclude_discount_and_explicit_price() -> None:
    overrides = CatalogOverrides(
        discount_percent={"aws": Decimal("10")},
        prices=[
            PriceOverride(
                cloud="aws",
                region="us-east-1",
                instance_type="p3.2xlarge",
                hourly_price_usd=Decimal("2.00"),
            )
        ],
        exclude=[ExcludeRule(cloud="azure", instance_type="Standard_NC*")],
    )
    adjusted = SHIPPED.with_overrides(overrides)
    p3 = [
        o
        for o in adjusted.query(["V100"], gpus=1, capacity="on-demand", clouds=["aws"])
        if o.instance_type == "p3.2xlarge"
    ]
    assert p3[0].region == "us-east-1" and p3[0].hourly == Money.of("2.00", "USD")
    assert p3[0].price_source == "override"
    west2 = next(o for o in p3 if o.region == "us-west-2")
    assert west2.hourly == Money.of("2.754", "USD") and west2.price_source == "discount"
    assert not [
        o for o in adjusted if o.cloud == "azure" and o.instance_type.startswith("Standard_NC")
    ]
    assert [o for o in adjusted if o.cloud == "azure" and o.instance_type.startswith("Standard_ND")]
    assert len(SHIPPED) > len(adjusted)  # the original is untouched


def test_vocabulary_from_the_data() -> None:
    regions = SHIPPED.regions()
    assert "eu-central-1" in regions["aws"] and "europe-west4" in regions["gcp"]
    assert "eastus" in regions["azure"] and "eastus" not in regions["aws"]
    assert {"V100", "T4", "A100", "H100", "L4", "A10G"} <= SHIPPED.accelerators()


def test_unavailable_offers_expire_with_the_clock() -> None:
    clock = FakeClock()
    cache = catalog.UnavailableOffers(clock, ttl=timedelta(minutes=15))
    key = _one("aws", "us-east-1", "p3.2xlarge").key
    cache.mark(key)
    assert cache.is_unavailable(key) and cache.current() == {key}
    clock.advance(timedelta(minutes=14, seconds=59))
    assert cache.is_unavailable(key)
    cache.mark(key, ttl=timedelta(seconds=1))  # a shorter mark does not shorten the back-off
    clock.advance(timedelta(seconds=1))
    assert not cache.is_unavailable(key) and cache.current() == frozenset()


def test_shipped_catalog_size() -> None:
    # Every cloud contributes; region-level offers for both capacity types.
    clouds = {o.cloud for o in SHIPPED}
    assert clouds == {"aws", "gcp", "azure"}
    assert len(SHIPPED) > 2000


def test_repeated_failures_back_an_offer_off_exponentially() -> None:
    clock = FakeClock()
    cache = catalog.UnavailableOffers(clock, ttl=timedelta(minutes=15), max_ttl=timedelta(hours=1))
    key = _one("aws", "us-east-1", "p3.2xlarge").key
    assert [cache.mark(key) for _ in range(4)] == [
        timedelta(minutes=15),
        timedelta(minutes=30),
        timedelta(hours=1),
        timedelta(hours=1),
    ]
    cache.succeeded(key)
    assert cache.mark(key) == timedelta(minutes=15)  # a success forgets the history
    # An offer that keeps failing stays at the longest back-off (the doubling once overflowed).
    assert [cache.mark(key) for _ in range(100)][-1] == timedelta(hours=1)

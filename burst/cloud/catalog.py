"""Offers and prices: what can be launched where, and what it costs per node-hour.

Sits under the decision: decide.plan() asks the catalog for offers compatible with a workload,
cheapest first. The static catalog ships inside the package (burst/data/prices/, an extract of the
SkyPilot catalog; see its SOURCE.md); admins' overrides from the service config are applied on top.
Capacity errors from a cloud mark an offer unavailable for a while (UnavailableOffers).
"""

from __future__ import annotations

import csv
import fnmatch
import heapq
import io
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from burst.amounts import Money, to_micros
from burst.clock import Clock
from burst.model import CLOUDS, CapacityType, Cloud, Offer, OfferKey

if TYPE_CHECKING:
    from burst.config import CatalogOverrides

CATALOG_CURRENCY = "USD"

# Columns kept from the source CSVs: the price facts, without the bulky GpuInfo and the CPU
# architecture / Hyper-V generation columns that no decision uses.
SHIPPED_COLUMNS: Mapping[Cloud, tuple[str, ...]] = {
    "aws": (
        "InstanceType",
        "AcceleratorName",
        "AcceleratorCount",
        "vCPUs",
        "MemoryGiB",
        "Price",
        "SpotPrice",
        "Region",
        "AvailabilityZone",
    ),
    "gcp": (
        "InstanceType",
        "vCPUs",
        "MemoryGiB",
        "AcceleratorName",
        "AcceleratorCount",
        "Region",
        "AvailabilityZone",
        "Price",
        "SpotPrice",
    ),
    "azure": (
        "InstanceType",
        "AcceleratorName",
        "AcceleratorCount",
        "vCPUs",
        "MemoryGiB",
        "Price",
        "SpotPrice",
        "Region",
    ),
}

# GCP prices GPUs apart from their host VM. Which host goes with which GPU count:
# fixed machine types for A2/A3/A4/G2 (cloud.google.com/compute/docs/gpus) ...
_GCP_FIXED_HOSTS: Mapping[str, Mapping[int, tuple[str, ...]]] = {
    "A100": {
        1: ("a2-highgpu-1g",),
        2: ("a2-highgpu-2g",),
        4: ("a2-highgpu-4g",),
        8: ("a2-highgpu-8g",),
        16: ("a2-megagpu-16g",),
    },
    "A100-80GB": {
        1: ("a2-ultragpu-1g",),
        2: ("a2-ultragpu-2g",),
        4: ("a2-ultragpu-4g",),
        8: ("a2-ultragpu-8g",),
    },
    "H100": {
        1: ("a3-highgpu-1g",),
        2: ("a3-highgpu-2g",),
        4: ("a3-highgpu-4g",),
        8: ("a3-highgpu-8g", "a3-edgegpu-8g"),
    },
    "H100-MEGA": {8: ("a3-megagpu-8g",)},
    "H200": {8: ("a3-ultragpu-8g",)},
    "B200": {8: ("a4-highgpu-8g",)},
    "L4": {
        1: ("g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
        2: ("g2-standard-24",),
        4: ("g2-standard-48",),
        8: ("g2-standard-96",),
    },
}
# ... and any N1 machine for the older GPUs, up to a vCPU and memory limit per GPU count
# (max vCPUs, max GiB), from the same GCP page.
_GCP_N1_LIMITS: Mapping[str, Mapping[int, tuple[int, int]]] = {
    "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}


def shipped_csv(cloud: Cloud, source_text: str) -> str:
    """The shipped form of a source price CSV: the same rows, only the SHIPPED_COLUMNS."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = SHIPPED_COLUMNS[cloud]
    writer.writerow(columns)
    for row in csv.DictReader(io.StringIO(source_text)):
        writer.writerow([row[c] for c in columns])
    return out.getvalue()


_PRICE_COLUMNS: tuple[tuple[CapacityType, str], ...] = (
    ("on-demand", "Price"),
    ("spot", "SpotPrice"),
)


def _price(text: str) -> int | None:
    return to_micros(text) if text.strip() else None


def _count(text: str) -> int | None:
    value = Decimal(text) if text.strip() else Decimal(0)
    return int(value) if value >= 1 and value == value.to_integral_value() else None


# (region, instance type, accelerator, GPUs, capacity): on GCP one host carries several GPU kinds.
_AccKey = tuple[str, str, str, int, CapacityType]


@dataclass(slots=True)
class _Acc:
    """Offers of one (region, instance, gpus, capacity) gathered over zones: the highest zone price
    is kept, since a pool may land in any of the zones and estimates must not undershoot budgets."""

    vcpus: float
    memory_gib: float
    micros: int
    zones: list[str]


def _gather(
    acc: dict[_AccKey, _Acc],
    key: _AccKey,
    vcpus: float,
    memory: float,
    micros: int,
    zone: str,
) -> None:
    found = acc.get(key)
    if found is None:
        acc[key] = _Acc(vcpus, memory, micros, [zone] if zone else [])
    else:
        found.micros = max(found.micros, micros)
        if zone and zone not in found.zones:
            found.zones.append(zone)


def _emit(cloud: Cloud, acc: Mapping[_AccKey, _Acc]) -> Iterator[Offer]:
    for (region, instance, accelerator, gpus, capacity), a in acc.items():
        yield Offer(
            cloud=cloud,
            region=region,
            instance_type=instance,
            capacity=capacity,
            accelerator=accelerator,
            gpus=gpus,
            vcpus=a.vcpus,
            memory_gib=a.memory_gib,
            hourly=Money(a.micros, CATALOG_CURRENCY),
            zones=tuple(sorted(a.zones)),
        )


# Instance types the price lists sell that the managed service does not run as NVIDIA GPU nodes,
# and why; `offers_from_rows` leaves them out.
UNRUNNABLE: Mapping[Cloud, tuple[tuple[str, str], ...]] = {
    "aws": (
        # AMD Radeon Pro V520: in no EKS accelerated AMI (EKS User Guide, "Use EKS-optimized
        # accelerated AMIs for GPU instances"; awslabs/amazon-eks-ami#1364 asks for the drivers).
        (r"g4ad\..*", "AMD GPUs: no EKS accelerated AMI"),
        # "P2 instances aren't supported on Amazon EKS because they require NVIDIA driver version
        # 470 or earlier" (EKS User Guide, eks-optimized-ami).
        (r"p2\..*", "needs NVIDIA driver 470 or earlier, which EKS AMIs do not ship"),
    ),
    "azure": (
        # NC (K80) and NV (M60) retired on 6 September 2023 (Azure's NC/NV retirement notices).
        (r"Standard_N[CV]\d+r?(_Promo)?", "retired (K80/M60)"),
        # NCv3 (V100) retired on 30 September 2025 (ncv3-nc6s-nc12s-nc24s-retirement).
        (r"Standard_NC\d+r?s_v3", "retired (NCv3)"),
        # "The NVv4 series (based on AMD GPUs) isn't supported" (AKS, use-nvidia-gpu).
        (r"Standard_NV\d+as_v4", "AMD GPUs: not supported by AKS"),
        # NV sizes get the GRID (graphics) driver, not CUDA (AKS, use-windows-gpu; the GPU health
        # check's GRID licence check for NVadsA10 v5): NVv3 and NVadsA10 v5 are VDI sizes.
        (r"Standard_NV\d+s_v3|Standard_NV\d+adm?s_A10_v5", "GRID (graphics) driver only"),
    ),
}


def unrunnable(cloud: Cloud, instance_type: str) -> str | None:
    """Why the managed service does not run `instance_type` as an NVIDIA GPU node, or None."""
    for pattern, why in UNRUNNABLE.get(cloud, ()):
        if re.fullmatch(pattern, instance_type):
            return why
    return None


def offers_from_rows(cloud: Cloud, rows: Iterable[Mapping[str, str]]) -> list[Offer]:
    """Turn price rows of one cloud (source or shipped columns) into region-level Offers."""
    acc: dict[_AccKey, _Acc] = {}
    if cloud == "gcp":
        return _gcp_offers(rows)
    for row in rows:
        gpus = _count(row["AcceleratorCount"])
        if not row["AcceleratorName"] or gpus is None or unrunnable(cloud, row["InstanceType"]):
            continue
        zone = row.get("AvailabilityZone", "")
        vcpus, memory = float(row["vCPUs"]), float(row["MemoryGiB"])
        for capacity, column in _PRICE_COLUMNS:
            micros = _price(row[column])
            if micros is not None:
                key = (row["Region"], row["InstanceType"], row["AcceleratorName"], gpus, capacity)
                _gather(acc, key, vcpus, memory, micros, zone)
    return list(_emit(cloud, acc))


def _gcp_hosts(accelerator: str, gpus: int, hosts: Mapping[str, Mapping[str, str]]) -> list[str]:
    fixed = _GCP_FIXED_HOSTS.get(accelerator, {}).get(gpus)
    if fixed is not None:
        return [h for h in fixed if h in hosts]
    limit = _GCP_N1_LIMITS.get(accelerator, {}).get(gpus)
    if limit is None:
        return []
    max_vcpus, max_gib = limit
    return [
        name
        for name, h in hosts.items()
        if name.startswith(("n1-standard-", "n1-highmem-"))
        and float(h["vCPUs"]) <= max_vcpus
        and float(h["MemoryGiB"]) <= max_gib
    ]


def _gcp_offers(rows: Iterable[Mapping[str, str]]) -> list[Offer]:
    gpu_rows: list[Mapping[str, str]] = []
    hosts_by_zone: dict[str, dict[str, Mapping[str, str]]] = defaultdict(dict)
    for row in rows:
        if row["InstanceType"]:
            hosts_by_zone[row["AvailabilityZone"]][row["InstanceType"]] = row
        else:
            gpu_rows.append(row)
    acc: dict[_AccKey, _Acc] = {}
    for g in gpu_rows:
        gpus = _count(g["AcceleratorCount"])
        if gpus is None:
            continue
        zone = g["AvailabilityZone"]
        hosts = hosts_by_zone.get(zone, {})
        for host_name in _gcp_hosts(g["AcceleratorName"], gpus, hosts):
            host = hosts[host_name]
            for capacity, column in _PRICE_COLUMNS:
                gpu_price, host_price = _price(g[column]), _price(host[column])
                if gpu_price is None or host_price is None:
                    continue
                key = (g["Region"], host_name, g["AcceleratorName"], gpus, capacity)
                _gather(
                    acc,
                    key,
                    float(host["vCPUs"]),
                    float(host["MemoryGiB"]),
                    gpu_price + host_price,
                    zone,
                )
    return list(_emit("gcp", acc))


def _sort_key(o: Offer) -> tuple[int, str, str, str, int, str]:
    return (o.hourly.micros, o.cloud, o.region, o.instance_type, o.gpus, o.capacity)


class Catalog:
    """An immutable set of offers with indexes for the decision's queries."""

    def __init__(self, offers: Iterable[Offer]) -> None:
        self._offers = sorted(offers, key=_sort_key)
        by_key: dict[tuple[str, CapacityType], list[Offer]] = defaultdict(list)
        by_region: dict[tuple[str, CapacityType, Cloud, str], list[Offer]] = defaultdict(list)
        for offer in self._offers:
            by_key[(offer.accelerator, offer.capacity)].append(offer)
            by_region[(offer.accelerator, offer.capacity, offer.cloud, offer.region)].append(offer)
        self._by_acc = dict(by_key)
        self._by_region = dict(by_region)
        self._by_offer_key = {o.key: o for o in self._offers}

    def __len__(self) -> int:
        return len(self._offers)

    def __iter__(self) -> Iterator[Offer]:
        return iter(self._offers)

    def get(self, key: OfferKey) -> Offer | None:
        return self._by_offer_key.get(key)

    def regions(self) -> dict[Cloud, frozenset[str]]:
        found: dict[Cloud, set[str]] = {c: set() for c in CLOUDS}
        for o in self._offers:
            found[o.cloud].add(o.region)
        return {c: frozenset(r) for c, r in found.items()}

    def accelerators(self) -> frozenset[str]:
        return frozenset(o.accelerator for o in self._offers)

    def query(
        self,
        accelerators: Iterable[str],
        *,
        gpus: int | None = None,
        capacity: CapacityType | Collection[CapacityType] = ("on-demand", "spot"),
        clouds: Collection[Cloud] | None = None,
        regions: Collection[tuple[Cloud, str]] | None = None,
        min_vcpus: float = 0,
        min_memory_gib: float = 0,
        unavailable: Collection[OfferKey] = (),
    ) -> list[Offer]:
        """Offers with one of `accelerators`, `gpus` per node (any when None), cheapest first."""
        capacities = (capacity,) if isinstance(capacity, str) else tuple(capacity)
        wanted = list(dict.fromkeys(accelerators))
        if regions is not None:
            lists = [
                self._by_region.get((a, c, cloud, region), [])
                for a in wanted
                for c in capacities
                for cloud, region in sorted(regions)
            ]
        else:
            lists = [self._by_acc.get((a, c), []) for a in wanted for c in capacities]
        merged = (
            heapq.merge(*lists, key=_sort_key)
            if len(lists) > 1
            else iter(lists[0] if lists else [])
        )
        return [
            o
            for o in merged
            if (gpus is None or o.gpus == gpus)
            and (clouds is None or o.cloud in clouds)
            and (regions is None or (o.cloud, o.region) in regions)
            and o.vcpus >= min_vcpus
            and o.memory_gib >= min_memory_gib
            and o.key not in unavailable
        ]

    def with_overrides(self, overrides: CatalogOverrides) -> Catalog:
        """Apply an admin's excluded types, negotiated discounts and explicit prices, in that order.

        An explicit price wins over a discount for the offers it names.
        """
        offers = [
            o
            for o in self._offers
            if not any(
                (rule.cloud is None or rule.cloud == o.cloud)
                and fnmatch.fnmatchcase(o.instance_type, rule.instance_type)
                and fnmatch.fnmatchcase(o.region, rule.region)
                for rule in overrides.exclude
            )
        ]
        result = []
        for o in offers:
            percent = overrides.discount_percent.get(o.cloud)
            if percent:
                micros = int(Decimal(o.hourly.micros) * (100 - percent) / 100)
                o = replace(o, hourly=Money(micros, o.hourly.currency), price_source="discount")
            for p in overrides.prices:
                if (p.cloud, p.region, p.instance_type) == (
                    o.cloud,
                    o.region,
                    o.instance_type,
                ) and (p.capacity == o.capacity and (p.gpus is None or p.gpus == o.gpus)):
                    o = replace(
                        o,
                        hourly=Money.of(p.hourly_price_usd, CATALOG_CURRENCY),
                        price_source="override",
                    )
            result.append(o)
        return Catalog(result)


def _read_shipped(cloud: Cloud) -> list[dict[str, str]]:
    text = resources.files("burst").joinpath("data", "prices", f"{cloud}.csv").read_text("utf-8")
    return list(csv.DictReader(io.StringIO(text)))


@cache
def shipped() -> Catalog:
    """The static catalog shipped with burst, loaded once per process."""
    return Catalog(o for cloud in CLOUDS for o in offers_from_rows(cloud, _read_shipped(cloud)))


class UnavailableOffers:
    """Offers that recently failed (no capacity, a launch that failed or timed out), backed off.

    The provision step marks an offer when it fails; the decision skips `current()` so that the
    next-best offer is tried. Each failure in a row doubles the back-off (from `ttl` up to
    `max_ttl`); the offer comes back once it passes, and a success forgets its history.
    """

    def __init__(
        self,
        clock: Clock,
        ttl: timedelta = timedelta(minutes=15),
        max_ttl: timedelta = timedelta(hours=4),
    ) -> None:
        self._clock = clock
        self._ttl, self._max_ttl = ttl, max_ttl
        self._until: dict[OfferKey, datetime] = {}
        self._failures: dict[OfferKey, int] = {}

    def mark(self, key: OfferKey, ttl: timedelta | None = None) -> timedelta:
        """Back `key` off; returns for how long."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        doublings = min(failures - 1, 32)  # a timedelta overflows after some forty doublings
        wait = ttl if ttl is not None else min(self._ttl * 2**doublings, self._max_ttl)
        until = self._clock.now() + wait
        self._until[key] = max(until, self._until.get(key, until))
        return wait

    def succeeded(self, key: OfferKey) -> None:
        self._failures.pop(key, None)

    def failures(self, key: OfferKey) -> tuple[int, datetime | None]:
        """How many failures in a row, and until when the offer is backed off."""
        return self._failures.get(key, 0), self._until.get(key)

    def restore(self, key: OfferKey, failures: int, until: datetime) -> None:
        """Take back what an earlier process remembered (cloud/backoff.py keeps it in the database)."""
        self._failures[key] = max(failures, self._failures.get(key, 0))
        self._until[key] = max(until, self._until.get(key, until))

    def is_unavailable(self, key: OfferKey) -> bool:
        until = self._until.get(key)
        return until is not None and self._clock.now() < until

    def current(self) -> frozenset[OfferKey]:
        now = self._clock.now()
        for key in [k for k, until in self._until.items() if until <= now]:
            del self._until[key]
        return frozenset(self._until)

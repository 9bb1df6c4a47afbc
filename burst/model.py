"""The nouns of the flow: frozen dataclasses that every step passes around.

The decision (decide.py) sees only these; the catalog produces Offers; providers turn PoolSpecs
into Pools. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from burst.money import Money

Cloud = Literal["aws", "gcp", "azure"]
CLOUDS: tuple[Cloud, ...] = ("aws", "gcp", "azure")
CapacityType = Literal["on-demand", "spot"]
CAPACITY_TYPES: tuple[CapacityType, ...] = ("on-demand", "spot")
PriceSource = Literal["catalog", "override", "discount", "live"]


@dataclass(frozen=True, slots=True)
class OfferKey:
    """What identifies an offer: capacity errors and back-off are remembered per key."""

    cloud: Cloud
    region: str
    instance_type: str
    capacity: CapacityType
    accelerator: str
    gpus: int

    def __str__(self) -> str:
        return (
            f"{self.cloud}/{self.region}/{self.instance_type}"
            f"+{self.gpus}x{self.accelerator}/{self.capacity}"
        )


@dataclass(frozen=True, slots=True)
class Offer:
    """One launchable node shape in one region at one capacity type, with its hourly price per node.

    For GCP `instance_type` is the host machine type and the GPUs are attached to it; the price is
    host + GPUs. `zones` lists where in the region the offer exists (empty where the cloud does not
    say, as for Azure).
    """

    cloud: Cloud
    region: str
    instance_type: str
    capacity: CapacityType
    accelerator: str
    gpus: int
    vcpus: float
    memory_gib: float
    hourly: Money
    price_source: PriceSource = "catalog"
    zones: tuple[str, ...] = ()

    @property
    def key(self) -> OfferKey:
        return OfferKey(
            self.cloud, self.region, self.instance_type, self.capacity, self.accelerator, self.gpus
        )

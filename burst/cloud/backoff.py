"""Offer back-offs that outlive the process: an offer the cloud refused (capacity, a launch that
never became ready) is marked unavailable in memory for the decision and in the database, so a
restarted or newly elected replica starts from the same back-offs."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from burst.cloud.catalog import UnavailableOffers
from burst.model import CapacityType, Cloud, OfferKey
from burst.store.tables import OfferBackoff


def _columns(offer: OfferKey) -> dict[str, Any]:
    return {
        "cloud": offer.cloud,
        "region": offer.region,
        "instance_type": offer.instance_type,
        "capacity": offer.capacity,
        "accelerator": offer.accelerator,
        "gpus": offer.gpus,
    }


class Backoffs:
    def __init__(self, unavailable: UnavailableOffers) -> None:
        self.unavailable = unavailable

    def mark(self, session: Session, offer: OfferKey) -> None:
        self.unavailable.mark(offer)
        failures, until = self.unavailable.failures(offer)
        session.merge(OfferBackoff(**_columns(offer), failures=failures, until=until))

    def recovered(self, session: Session, offer: OfferKey) -> None:
        self.unavailable.succeeded(offer)
        row = session.get(OfferBackoff, tuple(_columns(offer).values()))
        if row is not None:
            session.delete(row)

    def restore(self, session: Session) -> None:
        """A new process (restarted, or newly elected) starts from the back-offs in the database."""
        for row in session.scalars(select(OfferBackoff)):
            key = OfferKey(
                cast(Cloud, row.cloud),
                row.region,
                row.instance_type,
                cast(CapacityType, row.capacity),
                row.accelerator,
                row.gpus,
            )
            self.unavailable.restore(key, row.failures, row.until)

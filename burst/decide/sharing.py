"""Pools shared across policies (a policy's `placement.sharePools`): the open pools of every policy
that shares its pools, which the workloads of each of them may reuse.

Part of the placement (placement.py keeps one per plan; unpriced.py reads it; pure, no I/O). Only
the room a pool has is shared: a pool grows and opens for its own policy alone, within that
policy's limits, so that its idle and overhead stay its policy's to pay, while each run is spent
from its own policy's budgets (money/ledger.py). Another policy's pool dearer a node-hour than a
policy's `maxHourlyPrice` takes none of its work, as no new pool that dear would.
"""

from __future__ import annotations

from datetime import datetime

from burst.amounts import Money
from burst.cloud.catalog import Catalog
from burst.config import BurstPolicy, Config
from burst.decide.caps import Rates
from burst.decide.pools import EligiblePools, OpenPool, PolicyPools


def sharing_policies(config: Config) -> frozenset[str]:
    """The names of the policies that share their pools."""
    return frozenset(n for n, p in config.policies.items() if p.spec.placement.share_pools)


class SharedPools:
    """The open pools of the policies in `sharing`, as a plan opens them."""

    def __init__(self, now: datetime, sharing: frozenset[str], rates: Rates) -> None:
        self.sharing, self.rates = sharing, rates
        self.pools = PolicyPools(now)
        self._most_hourly: dict[str, int | None] = {}  # per policy, USD micros

    def open(self, pool: OpenPool) -> None:
        if pool.policy in self.sharing:
            self.pools.open(pool)

    def of_kind(
        self, policy: BurstPolicy, request: str | None, spot_ok: bool, catalog: Catalog
    ) -> EligiblePools | None:
        """The shared pools a request for `request` GPUs under `policy` may reuse, spot if
        `spot_ok`: its own and those of the other sharing policies within its price cap. None
        where `policy` does not share its pools."""
        name = policy.metadata.name
        if name not in self.sharing:
            return None
        if name not in self._most_hourly:
            cap, limits = None, policy.spec.limits
            if limits.max_hourly_price is not None:
                cap = self.rates.to_usd(Money.of(limits.max_hourly_price, limits.currency))
            self._most_hourly[name] = cap
        return self.pools.of_kind(policy, request, spot_ok, catalog, self._most_hourly[name])

    def foreign(self, policy: str) -> list[OpenPool]:
        """The open pools of the other policies `policy` shares pools with (none where it does
        not): it may take their room as it is."""
        if policy not in self.sharing:
            return []
        return [p for p in self.pools.opened if p.policy != policy]

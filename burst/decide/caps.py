"""Step 3 of the decision: caps and budgets. What a placement may cost: the policy's and the job's
maximum cost, and every budget the workload falls under (a hard budget is never exceeded; each
placement in a plan reserves its estimate, under a hard budget at least what its dispatch will
reserve, so later ones see less left). Prices are catalog USD;
caps and budgets are in their own currencies, converted so that estimates never undershoot."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_CEILING, Decimal

from burst.amounts import Money
from burst.cloud.catalog import CATALOG_CURRENCY
from burst.config import BurstPolicy
from burst.model import BudgetView, OfferKey, Workload
from burst.money.guard import first_hold


class PlanError(ValueError):
    """The configuration cannot be planned with (no ServiceConfig, a missing exchange rate)."""


@dataclass(frozen=True)
class Rates:
    """Units of each currency per USD; catalog prices are USD."""

    per_usd: Mapping[str, Decimal]

    def _rate(self, currency: str) -> Decimal:
        if currency == CATALOG_CURRENCY:
            return Decimal(1)
        rate = self.per_usd.get(currency)
        if rate is None:
            raise PlanError(f"no usdExchangeRates.{currency} in the ServiceConfig")
        return rate

    def from_usd(self, micros: int, currency: str) -> Money:
        """USD to `currency`, rounded up: estimates never undershoot a cap."""
        scaled = (Decimal(micros) * self._rate(currency)).to_integral_value(ROUND_CEILING)
        return Money(int(scaled), currency)

    def to_usd(self, money: Money) -> int:
        """`money` in USD micro-units, rounded down: a cap converted never grows."""
        return int(Decimal(money.micros) / self._rate(money.currency))

    def most_usd(self, left: Money) -> int:
        """The most USD micro-units that convert (rounded up, as from_usd) to no more than `left`;
        -1 when nothing is left. The planner compares what each of thousands of waiting workloads
        asks of a spent budget with it as an integer, rather than converting each."""
        if left.micros < 0:
            return -1
        most = self.to_usd(left)  # rounded down: within a micro-unit of the answer
        while self.from_usd(most + 1, left.currency) <= left:
            most += 1
        while most >= 0 and self.from_usd(most, left.currency) > left:
            most -= 1
        return most


def node_cost(hourly_micros: int, nodes: int, duration: timedelta) -> int:
    return math.ceil(hourly_micros * nodes * int(duration.total_seconds()) / 3600)


@dataclass
class Budgets:
    """What is left of each budget as the plan places workloads."""

    views: Sequence[BudgetView]
    rates: Rates
    # How far ahead a dispatch under a hard budget reserves its run (money/guard.py): the plan
    # asks a hard budget for as much, or it planned pools for dispatches the budget then refused
    # (the long soak's pools created and let go, pass after pass, under a spent budget).
    ahead: timedelta = timedelta(0)
    remaining: dict[str, Money] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.remaining = {b.name: b.remaining for b in self.views}

    def hold_usd(self, w: Workload, cost_usd: int, offer: OfferKey, hourly_micros: int) -> int:
        """What a dispatch costing `cost_usd` on nodes of `offer` holds of a hard budget."""
        return first_hold(cost_usd, w.gpus, offer.gpus, hourly_micros, self.ahead)

    def matching(self, w: Workload, policy: str) -> list[BudgetView]:
        wanted = {("team", w.team), ("policy", policy), ("namespace", w.namespace)}
        return [b for b in self.views if (b.scope, b.value) in wanted]

    def refusal(
        self, w: Workload, policy: str, cost_usd: int, hold_usd: int | None = None
    ) -> str | None:
        budgets = self.matching(w, policy)
        asked = self._asked(budgets, cost_usd, hold_usd)
        for b in budgets:
            cost = self.rates.from_usd(asked, b.remaining.currency)
            left = self.remaining[b.name]
            if b.hard and cost > left:
                return f"budget {b.name}: {max(left, Money.zero(left.currency))} left, needs {cost}"
        return None

    def soft_overruns(self, w: Workload, policy: str, cost_usd: int) -> list[str]:
        notes = []
        for b in self.matching(w, policy):
            cost = self.rates.from_usd(cost_usd, b.remaining.currency)
            if not b.hard and cost > self.remaining[b.name]:
                notes.append(f"soft budget {b.name} exceeded ({self.remaining[b.name]} left)")
        return notes

    def charge(self, w: Workload, policy: str, cost_usd: int, hold_usd: int | None = None) -> None:
        budgets = self.matching(w, policy)
        asked = self._asked(budgets, cost_usd, hold_usd)
        for b in budgets:
            self.remaining[b.name] -= self.rates.from_usd(asked, b.remaining.currency)

    @staticmethod
    def _asked(budgets: Sequence[BudgetView], cost_usd: int, hold_usd: int | None) -> int:
        """What each budget over a placement is asked for: under any hard one, every one holds
        the dispatch's first hold, as the dispatch will reserve it (intents.py)."""
        if hold_usd is not None and any(b.hard for b in budgets):
            return max(cost_usd, hold_usd)
        return cost_usd


@dataclass
class Caps:
    """The caps one plan checks every placement against."""

    rates: Rates
    budgets: Budgets

    def max_cost_usd(self, w: Workload, policy: BurstPolicy) -> int | None:
        limits = policy.spec.limits
        caps = []
        if limits.max_cost_per_job is not None:
            caps.append(self.rates.to_usd(Money.of(limits.max_cost_per_job, limits.currency)))
        if w.max_cost is not None:
            caps.append(self.rates.to_usd(w.max_cost))
        return min(caps) if caps else None

    def refusal(
        self,
        w: Workload,
        policy: BurstPolicy,
        cost_usd: int,
        max_cost_usd: int | None,
        hold_usd: int | None = None,
    ) -> str | None:
        if max_cost_usd is not None and cost_usd > max_cost_usd:
            currency = policy.spec.limits.currency
            return (
                f"max cost {self.rates.from_usd(max_cost_usd, currency)} per job, "
                f"needs {self.rates.from_usd(cost_usd, currency)}"
            )
        return self.budgets.refusal(w, policy.metadata.name, cost_usd, hold_usd)

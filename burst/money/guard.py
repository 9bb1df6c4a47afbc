"""Hard budgets while work runs. A dispatch reserves its estimate (service/intents.py), but a run
can cost more than its estimate: it runs longer than its owner declared, it starts again after a
spot reclaim, or the pass that sees it end comes a little later. So on every pass each copy that
runs under a hard budget is priced up to a little past the time burst can next act, and what
that costs beyond what its reservations still hold is reserved too; a run whose budget refuses
that is stopped (service/spend.py), so that what a hard budget has posted never passes its amount.

Pure: `top_up(run, now, ahead)`. A run is charged by the meter (meter.py) for its GPUs' share of
its node's price from its dispatch until it ends, hour by hour as each hour closes: what it has
not yet been charged starts at the end of its last posted hour (or its dispatch, or the budget's
period, whichever is latest), and must stay within what its reservations still hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from burst.config import Config


def horizon(config: Config) -> timedelta:
    """How far ahead a run under a hard budget is paid for: `graces.budgetHorizon`, and at least
    two reconcile intervals and a leader's lease."""
    assert config.service is not None
    spec = config.service.spec
    return max(
        spec.graces.budget_horizon,
        2 * spec.intervals.reconcile + spec.leader_election.lease_duration,
    )


@dataclass(frozen=True)
class Run:
    """A copy running under a hard budget, as that budget sees it."""

    budget: str
    workload_id: int
    pool_id: int
    since: datetime  # from when its charges are not posted yet, within the budget's period
    gpus: int
    gpus_per_node: int
    node_micros_per_hour: int  # its pool's price per node-hour
    currency: str
    held: int  # what its reservations on its pool still hold in this budget's period


def _share(gpus: int, gpus_per_node: int, node_micros_per_hour: int, seconds: float) -> int:
    """`gpus` of a node's price for `seconds`, rounded up: what the meter charges a run."""
    return math.ceil(gpus * node_micros_per_hour * seconds / (gpus_per_node * 3600))


def unposted(run: Run, until: datetime) -> int:
    """What the run will have been charged between `run.since` and `until`, not yet posted."""
    seconds = max(0.0, (until - run.since).total_seconds())
    return _share(run.gpus, run.gpus_per_node, run.node_micros_per_hour, seconds)


def top_up(run: Run, now: datetime, ahead: timedelta) -> int:
    """What to reserve more for `run` (0: nothing). Asked once what it will cost by `now +
    ahead` (when burst may next act on it) passes what its reservations hold, and then enough to
    cover it to `now + 2 x ahead`, so that a run going on is not topped up on every pass."""
    if unposted(run, now + ahead) <= run.held:
        return 0
    return unposted(run, now + 2 * ahead) - run.held


def first_hold(
    estimate: int, gpus: int, gpus_per_node: int, node_micros_per_hour: int, ahead: timedelta
) -> int:
    """What a dispatch under a hard budget reserves: its estimate, and at least what its run
    costs over twice the horizon, which the first pass after it would ask for (`top_up`). A
    short job's estimate alone let it be dispatched, then stopped by that pass and dispatched
    again, over and over, while its budget ran low (the long soak's theory namespace)."""
    return max(
        estimate, _share(gpus, gpus_per_node, node_micros_per_hour, 2 * ahead.total_seconds())
    )

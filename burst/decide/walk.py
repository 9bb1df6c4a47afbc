"""The walk of a plan's round (planner.py runs the rounds): which of the waiting queue a round
walks, and for each workload it walks whether the placement may take it at all, and whether its
wait sends it whatever its estimate. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from burst.config import BurstPolicy
from burst.decide import unpriced
from burst.decide.placement import Placement
from burst.decide.triggers import sends_anyway
from burst.decide.wording import Words
from burst.model import Workload

Refusal = Callable[[Placement, Workload, BurstPolicy, timedelta], "str | Words | None"]


def remembered_refusal() -> Refusal:
    """unpriced.refusal, remembered per workload: for a round's walk, while no room is taken."""
    known: dict[str, str | Words | None] = {}

    def refusal(
        placement: Placement, w: Workload, policy: BurstPolicy, runtime: timedelta
    ) -> str | Words | None:
        if w.uid not in known:
            known[w.uid] = unpriced.refusal(placement, w, policy, runtime)
        return known[w.uid]

    return refusal


def may_leave(
    policy_of: Mapping[str, BurstPolicy],
    runtimes: Mapping[str, timedelta],
    placement: Placement,
    refusal: Refusal,
    settled: set[str],
    explain: bool,
) -> Callable[[Workload], BurstPolicy | None]:
    """Whether the placement may take a workload this round, whatever sends it: its policy, or
    None (unclaimed, `settled` already, or refused unpriced (`refusal`): no room, or a spent
    hard budget; when `explain`, every claimed workload not settled, as its reason is worded)."""

    def may(w: Workload) -> BurstPolicy | None:
        policy = policy_of.get(w.uid)
        if policy is None or w.uid in settled:
            return None
        return policy if explain or refusal(placement, w, policy, runtimes[w.uid]) is None else None

    return may


Looked = list[tuple[Workload, BurstPolicy | None, "str | Words | None", bool]]
# What a round has settled and who may take the rest: the placed, the refused, each workload's
# policy, the placement and its refusals
Seen = tuple[set[str], set[str], Mapping[str, BurstPolicy], Placement, Refusal]


def walked(
    walk: list[Workload],
    seen: Seen,
    runtimes: Mapping[str, timedelta],
    now: datetime,
    queueing: str,
) -> tuple[Looked, frozenset[str]]:
    """Each workload a round walks, but those placed (out of the queue the sweep runs): its
    policy (None: it stays whatever, unclaimed or refused before), why the placement would refuse
    it whatever sends it, and whether its wait or quota sends it whatever its estimate (and the
    placement may take it); and those so sent, which leave a best-effort run unestimated (it runs
    the queue at once; a strict one asks in the walk). Asked once a round, before the sweep."""
    placed, stays, policy_of, placement, refusal = seen
    looked: Looked = []
    for w in walk:
        uid = w.uid
        if uid in placed:
            continue
        policy = policy_of.get(uid)
        if policy is None or uid in stays:
            looked.append((w, None, None, False))
            continue
        full = refusal(placement, w, policy, runtimes[uid])
        looked.append((w, policy, full, full is None and sends_anyway(w, policy.spec.trigger, now)))
    if queueing != "BestEffortFIFO":
        return looked, frozenset()
    return looked, frozenset(row[0].uid for row in looked if row[3])


def walk_length(
    pending: list[Workload], may: Callable[[Workload], BurstPolicy | None], queueing: str
) -> int:
    """How much of the queue a round walks: under strict FIFO, up to the last workload that may
    leave (those behind change no estimate ahead of them); under best-effort FIFO, all of it (one
    behind may take the GPUs one ahead waits for), unless none may leave (`may`). A replay's queue
    under spent budgets or full caps holds thousands that none may: it walks none."""
    last = next(
        (i for i in range(len(pending) - 1, -1, -1) if may(pending[i]) is not None),
        None,  # from the back: the last is found first
    )
    if last is None:
        return 0
    return len(pending) if queueing == "BestEffortFIFO" else last + 1

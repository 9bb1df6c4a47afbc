"""The offline optimum of a window of a trace: the least cloud cost at which every job of the window
meets its deadline, each job running whole (not preempted) either on-prem or in a cloud, knowing
every arrival and runtime in advance. `burst simulate --optimum` replays each window alone and
reports each policy's cost there as a multiple of it (compare.py); bound.py's fluid bound, which
lets jobs be split and preempted, is 0 whenever on-prem could do all the work in time, this one
only when it could do each job whole.

The problem, a mixed-integer program solved exactly by HiGHS (scipy.optimize.milp): on a grid of
`step` seconds, job j may start on-prem in any slot from its submission's to the last that ends by
its deadline, and holds its GPUs for floor(duration / step) slots; or it runs in a cloud at
`price x GPUs x duration` (no provisioning time, idle node or billing minimum). On-prem is one pool
of C GPUs in any order (no queue discipline or node boundary binds it): a lower bound on every
policy whatever its queue. The grid rounds starts and lengths down and deadlines' slots up, so every
real schedule that meets the deadlines maps to a feasible one of no greater cost: the result is a
lower bound on the exact optimum, and equal to it as `step` shrinks.

Started-by variables z[j, t] (1 once j has started by slot t, non-decreasing in t) make each slot's
capacity row two terms per job (z[j, t] - z[j, t - length]) instead of one per start that covers
it, so a window of a few hundred jobs stays a few hundred thousand non-zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array


@dataclass(frozen=True, slots=True)
class OptJob:
    submit: int  # seconds
    deadline: int
    duration: int
    gpus: int
    price: float | None  # cloud cost of one GPU-second; None: no cloud can run it


@dataclass(frozen=True)
class Optimum:
    cost: float  # the least cloud cost (a lower bound on it when not `exact`)
    exact: bool  # solved to optimality (else the solver's bound when its time ran out)
    cloud_jobs: int  # jobs the optimum sends to a cloud
    lost: int  # jobs no schedule can run in time (no cloud offer, and too big or late on-prem)


# A job no cloud can run may still be left out of the schedule (it misses its deadline anywhere);
# this cost makes the solver leave out as few as it can, and is not counted in the result.
LEFT_OUT = 1e12


def optimum(
    jobs: Sequence[OptJob], capacity: int, step: int = 300, time_limit_s: float = 60.0
) -> Optimum:
    """The least cloud cost of running every job of `jobs` by its deadline (see the module)."""
    fixed, sent, lost = 0.0, 0, 0
    columns: list[tuple[int, int, int, int, float | None]] = []  # gpus, first, last, length, cost
    for j in jobs:
        first, length = j.submit // step, j.duration // step
        last = j.deadline // step - length
        cloud = None if j.price is None else j.price * j.gpus * j.duration
        if j.gpus <= capacity and last >= first:
            if length > 0:  # (shorter than a slot: on the grid it takes no room on-prem)
                columns.append((j.gpus, first, last, length, cloud))
        elif cloud is not None:  # only a cloud can run it in time
            fixed, sent = fixed + cloud, sent + 1
        else:
            lost += 1
    if not columns:
        return Optimum(fixed, True, sent, lost)
    return _solve(columns, capacity, Optimum(fixed, True, sent, lost), time_limit_s)


def _solve(
    columns: list[tuple[int, int, int, int, float | None]],
    capacity: int,
    known: Optimum,
    time_limit_s: float,
) -> Optimum:
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lower: list[float] = []
    upper: list[float] = []
    cost: list[float] = []
    row = 0
    bases: list[int] = []  # each job's first z column
    clouds: list[tuple[int, bool]] = []  # each job's y column, and whether a cloud can run it

    def constrain(terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        nonlocal row
        for col, val in terms:
            rows.append(row)
            cols.append(col)
            vals.append(val)
        lower.append(lo)
        upper.append(hi)
        row += 1

    for _gpus, first, last, _length, price in columns:
        base = len(cost)
        bases.append(base)
        cost += [0.0] * (last - first + 1)
        for t in range(last - first):  # started by slot t => started by t + 1
            constrain([(base + t, 1.0), (base + t + 1, -1.0)], -np.inf, 0.0)
        y = len(cost)
        clouds.append((y, price is not None))
        cost.append(price if price is not None else LEFT_OUT)
        constrain([(base + last - first, 1.0), (y, 1.0)], 1.0, 1.0)  # on-prem, or a cloud
    # Capacity: in slot s, job j holds its GPUs iff it started in (s - length, s].
    start = min(c[1] for c in columns)
    slots = max(c[2] + c[3] for c in columns) - start
    held: dict[tuple[int, int], float] = {}
    for (gpus, first, last, length, _), base in zip(columns, bases, strict=True):
        for s in range(first, last + length):
            on = (s - start, base + min(s, last) - first)
            held[on] = held.get(on, 0.0) + gpus
            if s - length >= first:
                off = (s - start, base + min(s - length, last) - first)
                held[off] = held.get(off, 0.0) - gpus
    for (slot, col), val in held.items():
        if val:
            rows.append(row + slot)
            cols.append(col)
            vals.append(val)
    lower += [-np.inf] * slots
    upper += [float(capacity)] * slots
    n = len(cost)
    result = milp(
        np.array(cost),
        integrality=np.ones(n, dtype=np.int_),
        bounds=Bounds(np.zeros(n), np.ones(n)),
        constraints=LinearConstraint(
            coo_array((vals, (rows, cols)), shape=(row + slots, n)).tocsr(),
            np.array(lower),
            np.array(upper),
        ),
        options={"time_limit": time_limit_s, "mip_rel_gap": 1e-9},
    )
    if result.x is None:  # no schedule found in time: the solver's bound is still a bound
        bound = float(getattr(result, "mip_dual_bound", 0.0) or 0.0)
        return Optimum(known.cost + min(bound, _paid(columns)), False, known.cloud_jobs, known.lost)
    sent = [paid for y, paid in clouds if result.x[y] > 0.5]
    value = sum(
        (c[4] or 0.0 for c, (y, _) in zip(columns, clouds, strict=True) if result.x[y] > 0.5), 0.0
    )
    exact = result.status == 0
    if not exact:  # time ran out: the best schedule found costs `value`; the bound is below it
        value = min(value, float(getattr(result, "mip_dual_bound", value) or 0.0))
    return Optimum(
        known.cost + value,
        exact,
        known.cloud_jobs + sum(sent),
        known.lost + len(sent) - sum(sent),
    )


def _paid(columns: list[tuple[int, int, int, int, float | None]]) -> float:
    """The most a window's schedulable jobs could cost: each in a cloud."""
    return sum(c[4] for c in columns if c[4] is not None)

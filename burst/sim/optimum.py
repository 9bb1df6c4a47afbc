"""The offline optimum of a window of a trace: the least cloud cost at which every job of the window
meets its deadline, each job running whole (not preempted) either on-prem or in a cloud, knowing
every arrival and runtime in advance. bound.py's fluid bound, which lets jobs be split and
preempted, is 0 whenever on-prem could do all the work in time; this one only when it could do
each job whole. windows.py chains it over a trace's windows into the reference `burst simulate
--optimum` reports each policy against.

The problem, a mixed-integer program solved exactly by HiGHS (scipy.optimize.milp): on a grid of
`step` seconds, job j may start on-prem in any slot from its submission's to the last that ends by
its deadline, holding its GPUs for its length in slots; or it runs in a cloud at `price x GPUs x
duration` (no provisioning time, idle node or billing minimum). On-prem is one pool of GPUs in any
order (no queue discipline or node boundary binds it), with a number free in each slot.

The grid rounds one of two ways:
- `relaxed` (optimum()): starts and lengths rounded down, deadlines' slots up. Every real schedule
  that meets the deadlines maps to a feasible one of no greater cost, so the result is a lower
  bound on the exact optimum, equal to it as `step` shrinks (tested against a brute force).
- not relaxed (plan()): submissions rounded up, lengths up, deadlines down. Every schedule found
  is one a real cluster could run: a plan, at a cost the exact optimum is at most.

Started-by variables z[j, t] (1 once j has started by slot t, non-decreasing in t) make each slot's
capacity row two terms per job (z[j, t] - z[j, t - length]) instead of one per start that covers
it, so a window of a few hundred jobs stays a few hundred thousand non-zeros.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    cost: float  # the least cloud cost (when not `exact`: a bound below it, or the plan's cost)
    exact: bool  # solved to optimality within the time limit
    cloud_jobs: int  # jobs sent to a cloud
    no_offer: int  # jobs no cloud offer fits: outside the cloud's cost, left out (as in bound.py)
    starts: dict[int, int] = field(default_factory=dict)  # job -> its on-prem start slot


# Grid steps tried from the finest until the program has at most NONZEROS entries: a coarser grid
# gives a looser bound, a finer one a slower solve.
GRID_S = (60, 300, 900, 3600, 4 * 3600, 86400)
NONZEROS = 400_000
# Free GPUs in slots first..first + n - 1
Free = Callable[[int, int], np.ndarray]


def grid(jobs: Sequence[OptJob]) -> int:
    """The finest step of GRID_S whose program stays within NONZEROS (about four per slot a job
    may start or run in)."""
    for step in GRID_S:
        if sum(4 * max(1, j.deadline // step - j.submit // step + 1) for j in jobs) <= NONZEROS:
            return step
    return GRID_S[-1]


def optimum(
    jobs: Sequence[OptJob], capacity: int, step: int = 300, time_limit_s: float = 60.0
) -> Optimum:
    """A lower bound on the least cloud cost of running every job by its deadline, exact as `step`
    shrinks (the relaxed grid)."""
    return _optimum(jobs, step, lambda _first, n: np.full(n, capacity), True, time_limit_s)


def plan(jobs: Sequence[OptJob], step: int, free: Free, time_limit_s: float = 60.0) -> Optimum:
    """The cheapest schedule a real cluster could run with `free` GPUs in each slot (the
    conservative grid), with each on-prem job's start slot."""
    return _optimum(jobs, step, free, False, time_limit_s)


Column = tuple[int, int, int, int, float, int]  # gpus, first, last, length, cloud cost, job


def _optimum(
    jobs: Sequence[OptJob], step: int, free: Free, relaxed: bool, time_limit_s: float
) -> Optimum:
    fixed, sent, no_offer = 0.0, 0, 0
    columns: list[Column] = []
    for n, j in enumerate(jobs):
        if j.price is None:  # no cloud can run it: no part of the cloud's cost
            no_offer += 1
            continue
        if relaxed:
            first, length = j.submit // step, j.duration // step
        else:
            first, length = -(-j.submit // step), -(-j.duration // step)
        last = j.deadline // step - length
        cloud = j.price * j.gpus * j.duration
        if last < first or (length and j.gpus > int(np.max(free(first, last - first + length)))):
            fixed, sent = fixed + cloud, sent + 1  # only a cloud can run it in time
        elif length:  # (shorter than a slot: on the relaxed grid it takes no room on-prem)
            columns.append((j.gpus, first, last, length, cloud, n))
    known = Optimum(fixed, True, sent, no_offer)
    return _solve(columns, free, known, relaxed, time_limit_s) if columns else known


def _solve(
    columns: list[Column], free: Free, known: Optimum, relaxed: bool, time_limit_s: float
) -> Optimum:
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lower: list[float] = []
    upper: list[float] = []
    cost: list[float] = []
    row = 0
    bases: list[int] = []  # each job's first z column
    ys: list[int] = []  # each job's cloud column

    def constrain(terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        nonlocal row
        for col, val in terms:
            rows.append(row)
            cols.append(col)
            vals.append(val)
        lower.append(lo)
        upper.append(hi)
        row += 1

    for _gpus, first, last, _length, price, _n in columns:
        base = len(cost)
        bases.append(base)
        cost += [0.0] * (last - first + 1)
        for t in range(last - first):  # started by slot t => started by t + 1
            constrain([(base + t, 1.0), (base + t + 1, -1.0)], -math.inf, 0.0)
        ys.append(len(cost))
        cost.append(price)
        constrain([(base + last - first, 1.0), (ys[-1], 1.0)], 1.0, 1.0)  # on-prem, or a cloud
    # Capacity: in slot s, job j holds its GPUs iff it started in (s - length, s].
    start = min(c[1] for c in columns)
    slots = max(c[2] + c[3] for c in columns) - start
    held: dict[tuple[int, int], float] = {}
    for (gpus, first, last, length, _, _n), base in zip(columns, bases, strict=True):
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
    lower += [-math.inf] * slots
    upper += [float(v) for v in free(start, slots)]
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
    everything = sum(c[4] for c in columns)  # each job in a cloud: always feasible
    bound = max(0.0, float(getattr(result, "mip_dual_bound", 0.0) or 0.0))  # -inf before the root
    if result.x is None:  # nothing found in time
        value = min(bound, everything) if relaxed else everything
        return Optimum(known.cost + value, False, known.cloud_jobs, known.no_offer)
    x = result.x
    value, sent, starts = 0.0, 0, {}
    for (_g, first, last, _l, price, job), base, y in zip(columns, bases, ys, strict=True):
        if x[y] > 0.5:
            value, sent = value + price, sent + 1
        else:  # the first slot it has started by
            starts[job] = first + int(sum(1 for t in range(last - first + 1) if x[base + t] < 0.5))
    exact = result.status == 0
    if relaxed and not exact:  # time ran out: only the solver's bound is below the optimum
        value = min(value, bound)
    return Optimum(known.cost + value, exact, known.cloud_jobs + sent, known.no_offer, starts)

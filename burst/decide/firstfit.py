"""The on-prem queue under BestEffortFIFO, run forward as the cluster starts it: at every release
each waiting workload whose pods fit its product's nodes starts, in queue order (Kueue's
BestEffortFIFO and the plain kube-scheduler), so a small one starts past a large one that does
not fit, and those behind a large one may take the GPUs it waits for for a long time.

Part of the decision (pure, no I/O): onprem.py's `FirstFitSweep` asks the run, for each waiting
workload in queue order, when it starts, and tells it when one leaves the queue (the plan sends
it to a cloud). The run goes only as far as the start asked for. A workload that leaves before
it starts changed nothing: at each release it either started or did not fit, and the next of its
shape in line does not fit either. One that leaves after it started is taken back to the release
at which it started, by an undo log (one entry per release taken and per start), and the run
goes on from there without it. The run pauses before it places the workload asked for, so one
that the plan sends away at once, as it does most it sends, has nothing to undo.

A workload planned onto a pool still launching (`held`) is in the queue until its pool is
expected up, as the service takes it out only then: at a release before that it starts in its
place in line if it fits, and at one after it is gone. It is never asked for and never leaves.

Workloads that leave whatever their estimate (past their policy's wait, say) are not in the run
at all; each one's start is where it would start were it the only one of them to stay: at the
first point of the run where its pods fit and no workload ahead of it in the queue that fits is
still waiting (before then it takes nothing, so the run up to there is the same with it). A
plan of 4,000 waiting under config/'s policies took 180 s when the queue was run again from now
after each leave (`python benchmarks/bench_plan.py --queueing BestEffortFIFO`). A run kept from
one plan to the next, moved to the next plan's time and taken back to where the queue changed,
made a Philly replay twice as slow: the queue changes at its front between plans, and undoing a
start costs what making it does (docs/simulate.md, Speed).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

from burst.decide.cluster import Product, products
from burst.model import OnPrem, Workload


def queue_order(w: Workload) -> tuple[int, datetime, str]:
    """Kueue's order: higher priority first, then older first (creation), then by uid."""
    return (-w.priority, w.created, w.uid)


_Release = tuple[datetime, str, int, int]  # (when, product, node, GPUs)
_Item = tuple[int, Workload]  # a waiting workload and its place in the queue
_Lines = dict[tuple[int, int], "deque[_Item]"]  # one product's waiting, by pod shape
_Start = tuple[Product, "deque[_Item]", _Item, list[int], list[_Release]]
# Those of one line taken out of it at a release: the absent that would start then, or one held
# whose pool is up by then.
_Absent = tuple["deque[_Item]", list[_Item]]
# A workload planned onto a pool still launching, its run, and when its pool is expected up.
Held = tuple[Workload, timedelta, datetime]
_Shape = tuple["deque[_Item]", int, int]  # a line, its GPUs a pod, its pods


def _shapes(lines: _Lines) -> list[_Shape]:
    return [(line, per, pods) for (per, pods), line in lines.items()]


def _fitting(shapes: Iterable[_Shape], top: int, fits: Callable[[int, int], bool]) -> list[_Shape]:
    """The lines with a workload waiting whose pods fit now. One pod fits where the most GPUs free
    on a node (`top`, the tree's root) are enough: Nodes.fits, not called."""
    return [s for s in shapes if s[0] and (s[1] <= top if s[2] == 1 else fits(s[1], s[2]))]


class FirstFitRun:
    """The queue run forward from now, paused after the release at which the start last asked for
    happened."""

    def __init__(
        self,
        onprem: OnPrem,
        now: datetime,
        queue: Iterable[Workload],
        runtime: Mapping[str, timedelta],
        product_of: Callable[[Workload], str | None],
        absent: frozenset[str] = frozenset(),
        held: Iterable[Held] = (),
    ) -> None:
        self._cluster = products(onprem, now)
        self._runtime = runtime
        # Still in the queue until its pool is up, when the service copies it there and takes it
        # out (service/remote.py, dispatch_ready): before then it starts here if it fits first,
        # as any waiting workload (its dispatch is then cancelled).
        self._held = {w.uid: (up, run) for w, run, up in held}
        if self._held:
            ahead = sorted((w for w, _, _ in held), key=queue_order)
            queue = heapq.merge(queue, ahead, key=queue_order)
        self._releases: list[_Release] = [
            (at, name, node, gpus)
            for name, p in self._cluster.items()
            for at, node, gpus in p.releases
        ]
        heapq.heapify(self._releases)
        self._undone: dict[_Release, int] = {}  # releases undone but still in the heap
        # Waiting workloads by product, then by pod shape, each shape in queue order: the first in
        # queue order that fits is the first of one shape's line, so a release looks at a few
        # lines, not at every workload waiting (Philly's queue holds thousands). The absent are
        # lined up so too, apart.
        self._lines: dict[str, tuple[_Lines, _Lines]] = {}
        self._queued: dict[str, tuple[deque[_Item], _Item]] = {}
        # Each workload's line by its GPU request, pod shape and whether it is absent (None: it
        # never fits), found once per kind rather than per workload.
        kinds: dict[tuple[str | None, int, int, bool], deque[_Item] | None] = {}
        queued, held_ = self._queued, self._held
        for order, w in enumerate(queue):
            uid = w.uid
            kind = (w.accelerator, w.gpus_per_pod, w.pods, uid in absent)
            if kind in kinds:
                line = kinds[kind]
            else:
                line = kinds[kind] = self._line(w, product_of(w), kind[3])
            if line is None:
                continue
            item = (order, w)
            line.append(item)
            if uid not in held_:  # never asked for, never leaves
                queued[uid] = (line, item)
        self._starts: dict[str, tuple[datetime, int]] = {}  # start, and the release it came at
        self._log: list[_Release | _Start | _Absent] = []  # releases taken and starts, in turn
        self._at: list[tuple[datetime, int]] = [(now, 0)]  # each release: when, the log before it
        self._started = False  # whether what fits at the last release has started
        # The workload asked for, found to start at the last release before it was placed: the
        # release's starts pause there, so that one that then leaves has nothing to undo (most
        # that leave do so at once, and undoing a start and those after it cost what making them
        # did). Anything else asked places it first.
        self._paused: str | None = None

    def _line(self, w: Workload, name: str | None, gone: bool) -> deque[_Item] | None:
        """The line of workloads like `w` on product `name` (`gone`: of the absent); None where
        its pods fit no set of the product's nodes."""
        if name not in self._cluster or not self._cluster[name].could_fit(w.gpus_per_pod, w.pods):
            return None
        lines = self._lines.setdefault(name, ({}, {}))[gone]
        return lines.setdefault((w.gpus_per_pod, w.pods), deque())

    def start(self, uid: str) -> datetime | None:
        """When the workload starts (an absent one: were it the only absent one); None if it never
        does (its pods fit no set of its product's nodes, or it is not queued)."""
        return self._starts[uid][0] if self._run_to(uid, None) else None

    def starts_by(self, uid: str, until: datetime) -> bool:
        """Whether the workload starts at `until` or before, the run taken no further than that
        tells (an absent one: were it the only absent one)."""
        return self._run_to(uid, until) and self._starts[uid][0] <= until

    def _run_to(self, uid: str, until: datetime | None) -> bool:
        """Run until the workload starts (True), or no release is left before `until` (None: at
        all) or it is not queued (False)."""
        if uid not in self._queued:
            return False
        while uid not in self._starts:
            if until is not None and self._started:
                upcoming = self._upcoming()
                if upcoming is None or upcoming > until:
                    return False
            if not self._step(uid):
                return False
        return True

    def _upcoming(self) -> datetime | None:
        """When the next release comes (None: none is left), those undone taken off the heap."""
        releases, undone = self._releases, self._undone
        while releases and undone and releases[0] in undone:
            self._drop_undone(heapq.heappop(releases))
        return releases[0][0] if releases else None

    def _drop_undone(self, release: _Release) -> None:
        """A release undone, off the heap for good."""
        if self._undone[release] == 1:
            del self._undone[release]
        else:
            self._undone[release] -= 1

    def leave(self, uid: str) -> None:
        """Take a workload in the run out of the queue, as if it had never been queued."""
        found = self._queued.pop(uid, None)
        if found is None:
            return
        line, item = found
        if self._unpause() == uid:
            line.remove(item)  # not placed: nothing to undo
            return
        started = self._starts.get(uid)
        if started is not None:
            self._undo(started[1])
        line.remove(item)

    def _unpause(self) -> str | None:
        """The workload the starts paused at, as not started (its release's starts find it again
        when they go on), or None."""
        paused, self._paused = self._paused, None
        if paused is not None:
            del self._starts[paused]
        return paused

    def _step(self, asked: str) -> bool:
        """Take the next release unless what fits at the last has yet to start (False: none is
        left), then start what fits at it, pausing before the workload `asked` for."""
        if self._started and not self._release():
            return False
        self._unpause()
        for name, (lines, absent) in self._lines.items():
            if self._start_what_fits(self._cluster[name], name, lines, absent, asked):
                return True
        self._started = True
        return True

    def _release(self) -> bool:
        """Give the nodes the releases of the next time one comes (False: none is left)."""
        releases, undone, log = self._releases, self._undone, self._log
        at = None
        while releases and (at is None or releases[0][0] == at):
            release = heapq.heappop(releases)
            if undone and release in undone:  # gone for good: nothing to log
                self._drop_undone(release)
                continue
            at = release[0]
            _, name, node, gpus = release
            self._cluster[name].add(node, gpus)
            log.append(release)
        if at is None:
            return False
        self._at.append((at, len(log)))
        self._started = False
        return True

    def _start_what_fits(
        self, p: Product, name: str, lines: _Lines, absent: _Lines, asked: str
    ) -> bool:
        """Start, in queue order, what fits at the last release (again: what has started stays
        so); True when paused before `asked`, which would start next."""
        at, index = self._at[-1][0], len(self._at) - 1
        fits, held, tree = p.fits, self._held, p.tree
        # GPUs free only shrink while a release's starts are made: a line that does not fit now
        # fits no more until the next release, so only those that fit are looked at again (each
        # start looked at every line, a tenth of a Philly replay with config/).
        # As the cluster: no pod starts on a product with no GPU free.
        ready = _fitting(_shapes(lines), tree[1], fits) if p.total > 0 else []
        alone = _fitting(_shapes(absent), tree[1], fits)
        while True:
            first, head = None, 0
            for line, _, _ in ready:
                if first is None or line[0][0] < head:
                    first, head = line, line[0][0]
            if alone:
                self._absent_start(alone, head if first is not None else None, at, index)
            if first is None:
                return False
            item = first[0]
            w = item[1]
            if w.uid == asked:
                self._starts[w.uid] = (at, index)
                self._paused = w.uid
                return True
            first.popleft()
            hold = held.get(w.uid) if held else None
            if hold is not None and at > hold[0]:  # its pool is up first: it left for it
                self._log.append((first, [item]))
                ready = [s for s in ready if s[0]]
                continue
            runtime = self._runtime[w.uid] if hold is None else hold[1]
            nodes = p.place(w.gpus_per_pod, w.pods)
            ends = [(at + runtime, name, node, w.gpus_per_pod) for node in nodes]
            for end in ends:
                heapq.heappush(self._releases, end)
            self._starts[w.uid] = (at, index)
            self._log.append((p, first, item, nodes, ends))
            ready = _fitting(ready, tree[1], fits) if p.total > 0 else []
            if alone:
                alone = _fitting(alone, tree[1], fits)

    def _absent_start(
        self,
        alone: list[_Shape],
        before: int | None,
        at: datetime,
        index: int,
    ) -> None:
        """Each absent workload of the lines that fit now (`alone`), with none ahead of it in the
        queue that fits left (`before`: the place of the first that does), would start now."""
        for line, _, _ in alone:
            if not line or (before is not None and line[0][0] > before):
                continue
            now: list[_Item] = []
            while line and (before is None or line[0][0] < before):
                item = line.popleft()
                self._starts[item[1].uid] = (at, index)
                now.append(item)
            self._log.append((line, now))

    def _undo(self, index: int) -> None:
        """Back to release `index`, taken, with nothing started at it yet."""
        log, mark = self._log, self._at[index][1]
        while len(log) > mark:
            entry = log.pop()
            if len(entry) == 4:
                _, name, node, gpus = entry
                self._cluster[name].add(node, -gpus)
                heapq.heappush(self._releases, entry)
                continue
            if len(entry) == 2:
                line, items = entry
                for item in items:
                    self._starts.pop(item[1].uid, None)  # a held one taken out never started
                line.extendleft(reversed(items))
                continue
            p, line, item, nodes, ends = entry
            for end in ends:  # left in the heap, skipped when they come up
                self._undone[end] = self._undone.get(end, 0) + 1
            w = item[1]
            for node in nodes:
                p.add(node, w.gpus_per_pod)
            del self._starts[w.uid]
            line.appendleft(item)
        del self._at[index + 1 :]
        self._started = False

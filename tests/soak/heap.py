"""`python -m tests.soak.heap DIR burst-args...`: the `burst` CLI with tracemalloc on, writing
every minute to DIR the allocation sites whose live memory grew most since its fifth minute
(by then caches and pools are warm) and over the last twenty to forty minutes, and to a series
(`heap-PID.csv`) the traced total and the service's own part of it (the watcher's snapshots left
out: they stepped the total up by some 9 MiB when it first kept two), so that a long run's last
hour can be read apart from its warm-up.
The memory run (`benchmarks/soak.py --no-kills --heap`) starts its replicas this way, to tell a
leak (a site growing without end) from the allocator's settling (RSS growth with no site behind
it)."""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

EVERY_S = 60.0
WARM_S = 300.0
WINDOW_S = 1200.0  # the recent window's length
TOP = 25


def _growth(title: str, now: tracemalloc.Snapshot, then: tracemalloc.Snapshot) -> list[str]:
    return [title, *(str(stat) for stat in now.compare_to(then, "lineno")[:TOP])]


def _watch(out: Path, series: Path) -> None:
    first: tracemalloc.Snapshot | None = None
    # Two marks WINDOW_S apart: growth is read against the older, so it always covers between
    # one and two windows of the run's latest time.
    older: tuple[float, tracemalloc.Snapshot] | None = None
    newer: tuple[float, tracemalloc.Snapshot] | None = None
    started = time.monotonic()
    # traced: every traced block, this watcher's own snapshots included; service: the blocks
    # outside tracemalloc, what the service itself holds.
    series.write_text("seconds,traced_mib,service_mib\n")
    while True:
        time.sleep(EVERY_S)
        elapsed = time.monotonic() - started
        traced, peak = tracemalloc.get_traced_memory()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        service = sum(trace.size for trace in snapshot.traces)
        with series.open("a") as f:
            f.write(f"{elapsed:.0f},{traced / 2**20:.2f},{service / 2**20:.2f}\n")
        if elapsed < WARM_S:
            continue
        if first is None:
            first = snapshot
            older = newer = (elapsed, snapshot)
            continue
        assert older is not None and newer is not None
        lines = [f"# {elapsed:.0f} s, traced {traced / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"]
        lines += _growth("# growth since the fifth minute by site:", snapshot, first)
        lines += _growth(f"# growth since {older[0]:.0f} s by site:", snapshot, older[1])
        out.write_text("\n".join(lines) + "\n")
        if elapsed - newer[0] >= WINDOW_S:
            older, newer = newer, (elapsed, snapshot)


def main() -> None:
    out = Path(sys.argv[1]) / f"heap-{os.getpid()}.txt"
    series = out.with_suffix(".csv")
    sys.argv = ["burst", *sys.argv[2:]]
    tracemalloc.start(1)
    threading.Thread(target=_watch, args=(out, series), daemon=True).start()
    from burst.cli.main import main as burst

    burst()


if __name__ == "__main__":
    main()

"""`python -m tests.soak.heap DIR burst-args...`: the `burst` CLI with tracemalloc on, writing
every minute to DIR the allocation sites whose live memory grew most since its fifth minute
(by then caches and pools are warm).
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
TOP = 25


def _watch(out: Path) -> None:
    first: tracemalloc.Snapshot | None = None
    started = time.monotonic()
    while True:
        time.sleep(EVERY_S)
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        if first is None:
            if time.monotonic() - started >= WARM_S:
                first = snapshot
            continue
        traced, peak = tracemalloc.get_traced_memory()
        lines = [f"# {time.monotonic() - started:.0f} s, traced {traced / 2**20:.1f} MiB"]
        lines.append(f"# peak {peak / 2**20:.1f} MiB; growth since the fifth minute by site:")
        for stat in snapshot.compare_to(first, "lineno")[:TOP]:
            lines.append(str(stat))
        out.write_text("\n".join(lines) + "\n")


def main() -> None:
    out = Path(sys.argv[1]) / f"heap-{os.getpid()}.txt"
    sys.argv = ["burst", *sys.argv[2:]]
    tracemalloc.start(1)
    threading.Thread(target=_watch, args=(out,), daemon=True).start()
    from burst.cli.main import main as burst

    burst()


if __name__ == "__main__":
    main()

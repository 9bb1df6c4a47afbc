"""`burst report` on a month of 1,000,000 ledger rows, on SQLite and PostgreSQL.

The rows are a month of hourly charges of 400 pools for 12 teams on three clouds (usage, idle,
overhead), written straight into `ledger_entries`. Each report (by team, by provider) runs as a
user runs it, `burst report` in a process of its own: wall time and the process's peak RSS.
Before the reports aggregated in SQL they loaded every row as an object: 60-70 s of CPU and
2.4-3.0 GB at this size.

    python benchmarks/bench_report.py [--rows 1000000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, insert, text

from burst.store import database
from burst.store.tables import LedgerEntry

MONTH = datetime(2026, 11, 1, tzinfo=UTC)
CLOUDS = [("aws", "eu-central-1"), ("gcp", "europe-west4"), ("azure", "eastus")]
KINDS = ["usage", "usage", "usage", "idle", "overhead"]


def rows(n: int):  # type: ignore[no-untyped-def]
    hours = 30 * 24
    for i in range(n):
        pool = i % 400
        hour = (i // 400) % hours
        kind = KINDS[i % len(KINDS)]
        cloud, region = CLOUDS[pool % 3]
        start = MONTH + timedelta(hours=hour)
        workload = f"w{i % 5000}" if kind == "usage" else None
        yield {
            "idempotency_key": f"p{pool}:{i}",
            "kind": kind,
            "posted_at": start + timedelta(hours=1),
            "period_start": start,
            "period_end": start + timedelta(hours=1),
            "pool": f"pool-{pool}",
            "workload_uid": workload,
            "workload_name": f"ns{pool % 12}/{workload}" if workload else None,
            "namespace": f"ns{pool % 12}" if workload else None,
            "team": f"team-{pool % 12}" if workload else "ml-platform",
            "policy": "ml",
            "provider": cloud,
            "region": region,
            "gpu_seconds": 3600,
            "amount_micros": 1_000_000 + i % 997,
            "currency": "USD",
        }


def fill(url: str, n: int) -> float:
    started = time.monotonic()
    engine = database.make_engine(url)
    database.upgrade(engine)
    if engine.dialect.name == "postgresql":
        columns = list(next(rows(1)))
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            with cursor.copy(  # type: ignore[attr-defined]
                f"COPY ledger_entries ({', '.join(columns)}) FROM STDIN"
            ) as copy:
                for row in rows(n):
                    copy.write_row([row[c] for c in columns])
            raw.commit()
        finally:
            raw.close()
    else:
        batch: list[dict[str, object]] = []
        with engine.begin() as conn:
            for row in rows(n):
                batch.append(row)
                if len(batch) == 20_000:
                    conn.execute(insert(LedgerEntry), batch)
                    batch = []
            if batch:
                conn.execute(insert(LedgerEntry), batch)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    engine.dispose()
    return time.monotonic() - started


# `burst report` as `python -m burst` runs it, printing its own peak RSS (KiB) as it exits.
WRAPPER = """
import resource, runpy, sys
sys.argv = ["burst", *sys.argv[1:]]
try:
    runpy.run_module("burst", run_name="__main__")
finally:
    print("peak_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def run_report(url: str, by: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of `burst report` in its own process."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, "report", "--url", url, "--period", "2026-11", "--by", by],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(result.stderr)
    peak = next(line for line in result.stderr.splitlines() if line.startswith("peak_kib"))
    return wall, int(peak.split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--postgres", default=os.environ.get("BURST_TEST_DATABASE_URL"))
    args = parser.parse_args()
    targets: list[tuple[str, str, str | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        targets.append(("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}", None))
        if args.postgres:
            name = f"burst_bench_{uuid.uuid4().hex[:8]}"
            admin = create_engine(args.postgres, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            url = admin.url.set(database=name).render_as_string(hide_password=False)
            targets.append(("postgresql", url, name))
        try:
            for backend, url, _ in targets:
                filled = fill(url, args.rows)
                for by in ("team", "provider"):
                    wall, rss = run_report(url, by)
                    print(
                        json.dumps(
                            {
                                "database": backend,
                                "rows": args.rows,
                                "by": by,
                                "report_s": round(wall, 2),
                                "peak_rss_mib": round(rss),
                                "fill_s": round(filled, 1),
                            }
                        ),
                        flush=True,
                    )
        finally:
            for _, _, name in targets:
                if name:
                    with admin.connect() as conn:
                        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()

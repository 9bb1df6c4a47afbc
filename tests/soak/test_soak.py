"""The short soak CI runs: two real `burst serve` replicas on PostgreSQL for two and a half
minutes of a Philly window (about 240 jobs of 1.1 trace days), every fault kind at least once, and
every invariant held throughout and at the end. Runs are capped at six trace hours (30 s), so
that the drain ends within minutes. benchmarks/soak.py runs the long one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import _postgres_server_url
from tests.soak.harness import Settings, Soak

pytestmark = pytest.mark.postgres


def test_a_short_soak_under_every_fault_keeps_every_promise(tmp_path: Path) -> None:
    server = _postgres_server_url()
    if not server:
        pytest.skip("PostgreSQL: set BURST_TEST_DATABASE_URL (CI does) to run the soak")
    soak = Soak(
        tmp_path,
        server,
        Settings(seconds=130, jobs=250, fault_every=8.0, seed=7, drain=240.0, longest=6 * 3600),
    )
    report = soak.run()
    assert set(report.faults) == set(soak.faults()), report.faults  # every kind, at least once
    assert report.violations and not any(report.violations.values()), report.examples
    assert report.drained_s is not None, "work or pools left after the drain"
    assert report.undrained == [], report.undrained  # and what the drain left, had it left any
    in_flight = json.loads((tmp_path / "in_flight.json").read_text())  # when the feed stopped
    assert in_flight and all(set(e) >= {"workload", "copy_status", "pods"} for e in in_flight)
    assert report.fed >= 200 and report.workloads.get("succeeded", 0) > 0, report.workloads
    assert report.checks > 30  # the checker looked all along, not only at the end
    assert report.shared > 0  # theory's jobs and training's took each other's pools' room

"""`burst plan` on the documented example snapshot, and the documented schema."""

from __future__ import annotations

import json

from burst.decide.snapshot import load_snapshot, snapshot_schema
from tests.conftest import ROOT, burst_cli

run = burst_cli


def test_schema_in_docs_is_the_current_one() -> None:
    assert (ROOT / "docs" / "snapshot.schema.json").read_text() == snapshot_schema()


def test_plan_table_on_the_example() -> None:
    result = run("plan", "--snapshot", "docs/snapshot.example.json", "--config", "config")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Plan at 2026-11-30 09:00 UTC" in out
    assert "cms-ml/higgs-train" in out and "reuses pool" in out
    assert "deadline met on-prem" in out  # atlas-ml/tracking-ddp stays
    assert "no BurstPolicy claims namespace default" in out
    assert "max cost 500.00 CHF per job" in out  # atlas-ml/huge-pretrain
    assert "kubeflow-user-carol/eda" not in out  # not burstable: not mentioned


def test_plan_json_has_actions_and_skips_with_reasons_and_costs() -> None:
    result = run("plan", "-s", "docs/snapshot.example.json", "-c", "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert {"actions", "skips"} <= plan.keys()
    assert plan["actions"] and plan["skips"]
    for item in plan["actions"] + plan["skips"]:
        assert item["reason"]
        assert "estimated_cost" in item
    kinds = {a["kind"] for a in plan["actions"]}
    assert {"create-pool", "dispatch"} <= kinds
    snapshot = load_snapshot((ROOT / "docs" / "snapshot.example.json").read_bytes())
    burstable = {w.uid for w in snapshot.workloads if w.burstable}
    covered = {a["workload"] for a in plan["actions"] if a["kind"] == "dispatch"}
    covered |= {s["workload"] for s in plan["skips"]}
    assert covered == burstable


def test_plan_rejects_a_bad_snapshot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_text('{"workloads": [{"uid": "x", "kind": "Deployment"}]}')
    result = run("plan", "-s", str(bad), "-c", "config")
    assert result.returncode == 1
    assert "invalid snapshot" in result.stderr and "workloads.0.kind" in result.stderr
    assert "Traceback" not in result.stderr

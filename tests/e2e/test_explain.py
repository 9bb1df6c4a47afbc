"""`burst explain` on manifests a user would write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, burst_cli


def explain(*args: str) -> tuple[int, Any]:
    result = burst_cli("explain", *args, "--format", "json")
    return result.returncode, json.loads(result.stdout) if result.returncode == 0 else result.stderr


def test_a_burstable_job_shows_its_remote_copy() -> None:
    code, out = explain("docs/examples/higgs-train.yaml", "--config", "config")
    assert code == 0
    assert out["burstable"] is True and out["policy"] == "ml-training" and out["reasons"] == []
    # What it would cost if it burst now: 4 V100s for the annotated 2 h, on the cheapest allowed offer.
    assert (
        out["estimate"]["cost"].endswith(" USD") and float(out["estimate"]["cost"].split()[0]) > 0
    )
    assert out["estimate"]["runtime"] == "2h"
    assert out["estimate"]["where"].split()[0] in (
        "aws-eu-central-1",
        "gcp-europe-west4",
        "azure-eastus",
    )
    remote = out["remote"]
    assert remote["metadata"]["labels"]["burst.dev/installation"] == "kubeflow-onprem"
    pod = remote["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"burst.dev/pool": "<pool>"}
    assert pod["automountServiceAccountToken"] is False


def test_every_reason_of_a_hostile_job() -> None:
    code, out = explain("docs/examples/hostile.yaml", "--config", "config")
    assert code == 0 and out["burstable"] is False
    assert len(out["reasons"]) == 4
    assert any("hostNetwork" in r for r in out["reasons"]) and any(
        "privileged" in r for r in out["reasons"]
    )


def test_sanitisation_is_reported_even_without_a_policy(tmp_path: Path) -> None:
    manifest = (
        (ROOT / "docs" / "examples" / "hostile.yaml")
        .read_text()
        .replace("atlas-ml", "nobodys-namespace")
    )
    (tmp_path / "job.yaml").write_text(manifest)
    code, out = explain(str(tmp_path / "job.yaml"), "--config", "config")
    assert code == 0 and out["policy"] is None
    assert (
        out["reasons"][0] == "no BurstPolicy claims namespace nobodys-namespace with these labels"
    )
    assert any("hostPath" in r for r in out["reasons"])


def test_a_bare_pod_is_explained_not_burstable(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {burst.dev/burstable: 'true'}}\n"
        "spec: {containers: [{name: c, image: registry.cern.ch/x}]}\n"
    )
    code, out = explain(str(tmp_path / "pod.yaml"))
    assert code == 0 and out["burstable"] is False and out["remote"] is None
    assert out["reasons"][0] == "a bare Pod is not burstable: wrap it in a Job"


def test_unreadable_input_is_exit_1(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [unclosed\n")
    code, err = explain(str(tmp_path / "bad.yaml"))
    assert code == 1 and "cannot read" in err and "Traceback" not in err

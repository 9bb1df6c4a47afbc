"""`burst explain` on manifests a user would write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
    assert code == 1 and "bad.yaml:2:1: YAML syntax" in err and "Traceback" not in err


def explain_in_process(tmp_path: Path, change: Any) -> dict[str, Any]:
    """`burst explain --format json` of the shipped example after `change(manifest)`, in-process
    (the same command; this test asks it many times)."""
    import yaml
    from typer.testing import CliRunner

    from burst.cli.main import app

    manifest = yaml.safe_load((ROOT / "docs" / "examples" / "higgs-train.yaml").read_text())
    change(manifest)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = CliRunner().invoke(
        app, ["explain", str(path), "-c", str(ROOT / "config"), "-f", "json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def pod(m: dict[str, Any]) -> dict[str, Any]:
    return m["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container(m: dict[str, Any]) -> dict[str, Any]:
    return pod(m)["containers"][0]  # type: ignore[no-any-return]


REFUSED = [
    ("nodeName", lambda m: pod(m).update(nodeName="onprem-7"), "template.spec.nodeName"),
    (
        "imagePullSecrets",
        lambda m: pod(m).update(imagePullSecrets=[{"name": "registry-admin"}]),
        "template.spec.imagePullSecrets[0]: Secret registry-admin",
    ),
    (
        "csi-secret",
        lambda m: pod(m).update(
            volumes=[
                {"name": "s3", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "s3-admin"}}}
            ]
        ),
        "csi.nodePublishSecretRef: Secret s3-admin",
    ),
    (
        "gitRepo",
        lambda m: pod(m).update(volumes=[{"name": "src", "gitRepo": {"repository": "r"}}]),
        "gitRepo volumes are not allowed",
    ),
    (
        "nfs",
        lambda m: pod(m).update(volumes=[{"name": "eos", "nfs": {"server": "s", "path": "/"}}]),
        "nfs volumes are not allowed",
    ),
    (
        "priority",
        lambda m: pod(m).update(priorityClassName="system-node-critical"),
        "template.spec.priorityClassName",
    ),
    ("scheduler", lambda m: pod(m).update(schedulerName="volcano"), "template.spec.schedulerName"),
    ("runtime", lambda m: pod(m).update(runtimeClassName="kata"), "template.spec.runtimeClassName"),
    (
        "sysctl",
        lambda m: pod(m).update(
            securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
        ),
        "sysctl kernel.msgmax is not safe",
    ),
    (
        "seccomp",
        lambda m: pod(m).update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        "seccompProfile: Unconfined",
    ),
    (
        "ephemeral",
        lambda m: pod(m).update(
            ephemeralContainers=[
                {"name": "d", "image": "x", "securityContext": {"privileged": True}}
            ]
        ),
        "template.spec.ephemeralContainers",
    ),
    (
        "negative-gpus",
        lambda m: container(m)["resources"]["limits"].update({"nvidia.com/gpu": -2}),
        "resources.limits[nvidia.com/gpu]: -2 is not a whole number of GPUs",
    ),
    (
        "thousand-replicas",
        lambda m: m.update(
            apiVersion="kubeflow.org/v1",
            kind="PyTorchJob",
            spec={
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": m["spec"]["template"]},
                    "Worker": {"replicas": 999, "template": m["spec"]["template"]},
                }
            },
        ),
        "no offer with 1000x4",
    ),
]


@pytest.mark.parametrize(("case", "change", "named"), REFUSED, ids=[r[0] for r in REFUSED])
def test_explain_refuses_what_the_service_would_refuse_naming_the_field(
    tmp_path: Path, case: str, change: Any, named: str
) -> None:
    """`burst explain` said "may burst" for jobs the service then skipped: it now runs the same
    sanitiser and the same plan, and says which field or check refuses."""
    out = explain_in_process(tmp_path, change)
    assert out["burstable"] is False
    assert any(named in r for r in out["reasons"]), out["reasons"]


def test_explain_lists_what_the_copy_leaves_out_and_bad_annotations(tmp_path: Path) -> None:
    def change(m: dict[str, Any]) -> None:
        pod(m)["tolerations"] = [{"operator": "Exists"}]
        m["metadata"]["annotations"].update(
            {"burst.dev/deadline": "2001-01-01T00:00:00Z", "burst.dev/max-cost": "-5"}
        )

    out = explain_in_process(tmp_path, change)
    assert out["burstable"] is True
    warnings = "\n".join(out["warnings"])
    assert "a catch-all toleration" in warnings
    assert (
        "burst.dev/deadline='2001-01-01T00:00:00Z' is ignored: it is before the job was created"
        in warnings
    )
    assert "burst.dev/max-cost='-5' is ignored: a cost cap cannot be negative" in warnings

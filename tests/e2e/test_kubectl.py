"""kubectl against `burst sandbox up`: what an admin does to look around a sandbox cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not on the PATH"
)

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: hello
  labels: {team: cms-ml}
spec:
  template:
    metadata:
      annotations: {sandbox.burst.dev/duration: "0.3s"}
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: registry.example.org/hello:1
          resources:
            limits: {nvidia.com/gpu: 1}
"""


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("sandbox") / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "burst",
            "sandbox",
            "up",
            "--port",
            "0",
            "--nodes",
            "2",
            "--gpu",
            "Tesla-T4",
            "--kubeconfig",
            str(path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert re.match(
        r"sandbox API server at http://127\.0\.0\.1:\d+ with 2 node\(s\) of 4x Tesla-T4", first
    ), first
    yield path
    process.terminate()
    process.communicate(timeout=10)
    assert process.returncode == 0


def kubectl(kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        ["kubectl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_get_apply_describe_delete(kubeconfig: Path, tmp_path: Path) -> None:
    assert kubectl(kubeconfig, "get", "nodes", "-o", "name").split() == [
        "node/sandbox-gpu-0",
        "node/sandbox-gpu-1",
    ]
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB)
    assert kubectl(kubeconfig, "apply", "-f", str(manifest)).strip() == "job.batch/hello created"
    assert kubectl(kubeconfig, "apply", "-f", str(manifest)).strip() == "job.batch/hello unchanged"
    assert (
        kubectl(kubeconfig, "get", "jobs", "-l", "team=cms-ml", "-o", "name").strip()
        == "job.batch/hello"
    )
    wait_for(
        lambda: (
            "Complete"
            in kubectl(
                kubeconfig, "get", "job", "hello", "-o", "jsonpath={.status.conditions[*].type}"
            )
        ),
        timeout=60,
        every=0.1,
    )
    described = kubectl(kubeconfig, "describe", "job", "hello")
    assert "Completed" in described and "nvidia.com/gpu:  1" in described
    node = kubectl(
        kubeconfig,
        "get",
        "pods",
        "-l",
        "job-name=hello",
        "-o",
        "jsonpath={.items[0].spec.nodeName}",
    )
    assert node.startswith("sandbox-gpu-")
    assert "Tesla-T4" in kubectl(kubeconfig, "describe", "node", node)
    assert kubectl(kubeconfig, "delete", "-f", str(manifest)).strip() == 'job.batch "hello" deleted'
    wait_for(  # kubectl delete left no pods behind
        lambda: not kubectl(kubeconfig, "get", "pods", "-o", "name").strip(), timeout=60, every=0.1
    )

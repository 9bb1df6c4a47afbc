"""`burst serve` replicas: one leads (fencing epoch in the database), the other takes over within
the lease duration when the leader dies; both serve the read-only API."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client
from sqlalchemy import select

from burst.sandbox import Sandbox
from burst.store import database
from burst.store.tables import Leadership
from tests.conftest import ROOT, burst_cli, wait_for

SERVICE = """\
apiVersion: burst.dev/v1
kind: ServiceConfig
metadata: {{name: burst}}
spec:
  installationId: serve-test
  database: {{url: "sqlite:///{db}"}}
  onPrem: {{kubeconfig: {onprem}}}
  targets:
    - name: sim-aws
      provider: sim
      region: eu-central-1
      sim: {{cloud: aws}}
      kubernetes: {{kubeconfig: {remote}}}
  intervals: {{reconcile: 1s}}
  api: {{tokenFile: {token}}}
  leaderElection: {{namespace: default, leaseName: burst-leader, leaseDuration: 3s}}
---
apiVersion: burst.dev/v1
kind: BurstPolicy
metadata: {{name: ml}}
spec:
  selector: {{namespaces: [ml]}}
  placement: {{targets: [sim-aws]}}
  replication: {{imageRegistries: [registry.cern.ch]}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def holder(api: Any) -> str | None:
    try:
        return (
            client.CoordinationV1Api(api)
            .read_namespaced_lease("burst-leader", "default")
            .spec.holder_identity
        )
    except client.exceptions.ApiException:
        return None


def epoch(url: str) -> tuple[int, str] | None:
    engine = database.make_engine(url)
    with database.sessions(engine)() as s:
        row = s.scalar(select(Leadership))
        found = (row.epoch, row.holder) if row else None
    engine.dispose()
    return found


def test_leader_failover(sandbox: Any, tmp_path: Path) -> None:
    with Sandbox(controllers=False) as remote:
        onprem_config = sandbox.kubeconfig(tmp_path / "onprem.kubeconfig")
        remote_config = remote.kubeconfig(tmp_path / "remote.kubeconfig")
        (tmp_path / "token").write_text("serve-token\n")
        config_dir = tmp_path / "config"
        config_dir.mkdir()
        url = f"sqlite:///{tmp_path / 'burst.db'}"
        (config_dir / "burst.yaml").write_text(
            SERVICE.format(
                db=tmp_path / "burst.db",
                onprem=onprem_config,
                remote=remote_config,
                token=tmp_path / "token",
            )
        )
        upgrade = burst_cli("db", "upgrade", "-c", str(config_dir))
        assert upgrade.returncode == 0, upgrade.stderr
        api = client.ApiClient(client.Configuration(host=sandbox.url))
        ports = {"a": free_port(), "b": free_port()}

        def start(name: str) -> subprocess.Popen[str]:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "burst",
                    "serve",
                    "-c",
                    str(config_dir),
                    "--identity",
                    name,
                    "--port",
                    str(ports[name]),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

        a = start("a")
        try:
            wait_for(lambda: holder(api) == "a", timeout=20)
            wait_for(lambda: epoch(url) == (1, "a"), timeout=10)
            b = start("b")
            try:
                wait_for(
                    lambda: (
                        urllib3.request("GET", f"http://127.0.0.1:{ports['b']}/healthz").status
                        == 200
                        if _listening(ports["b"])
                        else False
                    ),
                    timeout=20,
                )
                time.sleep(2)
                assert holder(api) == "a"  # b follows while a renews
                answer = urllib3.request(
                    "GET",
                    f"http://127.0.0.1:{ports['b']}/api/v1/pools",
                    headers={"Authorization": "Bearer serve-token"},
                )
                assert answer.status == 200  # followers serve the read-only API
                a.send_signal(signal.SIGKILL)  # the leader dies without letting go
                killed = time.monotonic()
                wait_for(lambda: holder(api) == "b", timeout=15)
                assert (
                    time.monotonic() - killed < 3 + 1.5 + 1.5
                )  # lease duration, a retry, and slack
                wait_for(lambda: epoch(url) == (2, "b"), timeout=10)
            finally:
                b.kill()
                b.communicate()
        finally:
            a.kill()
            a.communicate()
        api.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return path


@pytest.mark.parametrize(
    ("on_prem", "said"),
    [
        ("{{inCluster: true}}", "spec.onPrem: inCluster: true, but this is not a pod"),
        ("{{kubeconfig: /nonexistent/kubeconfig}}", "spec.onPrem: kubeconfig /nonexistent"),
        ("{{kubeconfig: {closed}}}", "spec.onPrem: cannot reach the API server at http://127"),
    ],
    ids=["not-in-a-pod", "no-kubeconfig", "unreachable"],
)
def test_serve_says_in_one_line_what_keeps_it_from_starting(
    tmp_path: Path, on_prem: str, said: str
) -> None:
    """A config that could not reach its cluster ended in a kubernetes ConfigException traceback."""
    closed = _kubeconfig(tmp_path / "closed", f"http://127.0.0.1:{free_port()}")
    text = SERVICE.replace("onPrem: {{kubeconfig: {onprem}}}", f"onPrem: {on_prem}")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "burst.yaml").write_text(
        text.format(
            db=tmp_path / "b.db",
            remote=closed,
            token=tmp_path / "token",
            closed=closed,
        )
    )
    assert burst_cli("db", "upgrade", "-c", str(config_dir)).returncode == 0
    result = burst_cli("serve", "-c", str(config_dir), timeout=60)
    assert result.returncode == 1, result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr

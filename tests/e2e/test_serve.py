"""`burst serve` replicas: one leads (fencing epoch in the database), the other takes over once the
leader's Lease has run out after it died, and not before; both serve the read-only API.

The times checked are the Lease's own (when the leader last renewed, when the follower acquired),
so that a slow machine makes the test wait longer, never fail; the waits are generous."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta
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
from tests.soak.world import kubeconfig

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


LEASE = timedelta(seconds=3)  # leaseDuration in SERVICE


def lease(api: Any) -> Any:
    """The Lease's spec (holder, acquire and renew times), None before anyone took it."""
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease("burst-leader", "default").spec
    except client.exceptions.ApiException:
        return None


def holder(api: Any) -> str | None:
    spec = lease(api)
    return spec.holder_identity if spec else None


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
        upgrade(url)
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

        replicas = {name: start(name) for name in ports}  # together, as a Deployment's
        try:
            leader = wait_for(lambda: holder(api), timeout=60)
            (follower,) = set(ports) - {leader}
            wait_for(lambda: epoch(url) == (1, leader), timeout=60)
            wait_for(lambda: _healthy(ports[follower]), timeout=60)
            # The follower follows while the leader renews: a renewal now that both are up.
            renewed = lease(api).renew_time
            wait_for(lambda: lease(api).renew_time > renewed, timeout=60)
            assert holder(api) == leader
            answer = urllib3.request(
                "GET",
                f"http://127.0.0.1:{ports[follower]}/api/v1/pools",
                headers={"Authorization": "Bearer serve-token"},
            )
            assert answer.status == 200  # followers serve the read-only API
            replicas[leader].send_signal(signal.SIGKILL)  # it dies without letting go
            replicas[leader].wait()
            last = lease(api)  # the dead leader's last renewal
            assert last.holder_identity == leader
            wait_for(lambda: holder(api) == follower, timeout=60)
            # Not before the Lease ran out: a lease duration after the last renewal at least.
            taken = lease(api).acquire_time
            assert taken - last.renew_time >= LEASE, (taken, last.renew_time)
            wait_for(lambda: epoch(url) == (2, follower), timeout=60)
        finally:
            for replica in replicas.values():
                replica.kill()
                replica.communicate()
        api.close()


def upgrade(url: str) -> None:
    """The schema `burst db upgrade` creates (tests/e2e/test_cli.py runs that command)."""
    engine = database.make_engine(url)
    database.upgrade(engine)
    engine.dispose()


def _healthy(port: int) -> bool:
    if not _listening(port):
        return False
    return urllib3.request("GET", f"http://127.0.0.1:{port}/healthz").status == 200


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


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
    closed = kubeconfig(tmp_path / "closed", f"http://127.0.0.1:{free_port()}")
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
    upgrade(f"sqlite:///{tmp_path / 'b.db'}")
    result = burst_cli("serve", "-c", str(config_dir), timeout=60)
    assert result.returncode == 1, result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr

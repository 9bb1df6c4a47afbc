"""The soak's world, all of it real processes or real connections: two sandbox API servers (the
on-prem cluster and the cloud cluster), a fresh PostgreSQL database, the simulated clouds in a
state file, and two `burst serve` replicas. The fault injector kills, pauses and cuts off each
of them through what is here: a process is signalled, a connection goes through a Gate."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from kubernetes import client
from sqlalchemy import create_engine, text

ROOT = Path(__file__).parents[2]
INSTALLATION = "soak"
LEASE_S = 3  # the replicas' Lease duration
REMOTE_GRACE = timedelta(seconds=15)  # graces.remoteCluster


class Gate:
    """A TCP forwarder on 127.0.0.1 that can be shut: while shut, connections are refused and
    those open are cut, as when a database or an API server is unreachable. While shut, the port
    is held by a socket that is bound but not listening (connecting to it is refused), so that no
    other socket takes it meanwhile."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._holder: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.open()

    def _bound(self) -> socket.socket:
        """A socket bound to the gate's port (any free one the first time). The port's last
        connections are being aborted as this runs: a moment may pass before it is free."""
        for attempt in range(50):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", self.port))
            except OSError:
                sock.close()
                if attempt == 49:
                    raise
                time.sleep(0.1)
                continue
            self.port = sock.getsockname()[1]
            return sock
        raise AssertionError("unreachable")

    def open(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            if self._holder is not None:
                self._holder.close()
                self._holder = None
            listener = self._bound()
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def shut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            cut, self._open = self._open, []
            if listener is None:
                return
            # Shut down, not only closed: a thread blocked in accept() keeps a closed socket
            # listening on Linux, and the port taken.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            for sock in cut:  # aborted (RST), so that they leave the port at once
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._holder = self._bound()

    def close(self) -> None:
        self.shut()
        with self._lock:
            if self._holder is not None:
                self._holder.close()
                self._holder = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                near, _ = listener.accept()
            except OSError:
                return  # shut
            try:
                far = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                near.close()
                continue
            far.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    near.close()
                    far.close()
                    return
                self._open += [near, far]
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Process:
    """A child process whose output goes to a log file (appended to across restarts)."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0
        self._out: IO[str] | None = None

    def start(self) -> None:
        if self._out is not None:  # the last run's (it exited, or was killed)
            self._out.close()
        self._out = self.log.open("a")
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGCONT)  # a paused process dies too
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        if self._out is not None:
            self._out.close()

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._out is not None:
            self._out.close()

    def rss_mib(self) -> float | None:
        pid = self.pid
        if pid is None:
            return None
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return None


def sandbox(name: str, workdir: Path, nodes: int) -> tuple[Process, str]:
    """A sandbox API server in its own process, and its URL."""
    kubeconfig = workdir / f"{name}.kubeconfig"
    argv = [sys.executable, "-m", "burst", "sandbox", "up", "--nodes", str(nodes)]
    argv += ["--gpus-per-node", "4", "--port", "0", "--kubeconfig", str(kubeconfig)]
    process = Process(name, argv, workdir / f"{name}.log")
    process.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in process.log.read_text().splitlines():
            if "http://127.0.0.1:" in line:
                url = next(w for w in line.split() if w.startswith("http://"))
                return process, url.rstrip(",")
        time.sleep(0.1)
    raise RuntimeError(f"sandbox {name} did not start: {process.log.read_text()[-500:]}")


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return path


def api(url: str) -> Any:
    configuration = client.Configuration(host=url)
    configuration.connection_pool_maxsize = 8
    return client.ApiClient(configuration)


@contextlib.contextmanager
def database(server_url: str) -> Any:
    """A fresh PostgreSQL database on `server_url`'s server: (its URL parts), dropped after."""
    from burst.store.database import resolve_url

    admin_url = resolve_url(server_url)
    name = f"burst_soak_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

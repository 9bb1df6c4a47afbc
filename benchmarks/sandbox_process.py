"""Run `burst sandbox up` in a process of its own for a benchmark, so that the client side and the
API server do not share one interpreter lock."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sandbox_process() -> Iterator[str]:
    """The URL of a fresh sandbox with no nodes; stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "burst",
                "sandbox",
                "up",
                "--nodes",
                "0",
                "--port",
                "0",
                "--kubeconfig",
                f"{tmp}/kubeconfig",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert server.stdout is not None
        try:
            yield server.stdout.readline().split()[4]
        finally:
            server.terminate()
            server.wait()

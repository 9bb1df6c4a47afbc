"""A forwarding HTTP proxy for tests: passes requests to a real local server (moto), and on
request delays an answer past the client's timeout or answers with a scripted error instead."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import urllib3


@dataclass
class Rule:
    matches: Callable[[str, str, bytes], bool]  # (method, path, body)
    delay: float = 0.0  # forward, then hold the answer this long
    status: int | None = None  # answer this instead of forwarding
    body: bytes = b""
    headers: dict[str, str] | None = None
    times: int = 1


class Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/")
        self.http = urllib3.PoolManager(maxsize=8)
        self.rules: list[Rule] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, rule: Rule) -> None:
        with self.lock:
            self.rules.append(rule)

    def take(self, method: str, path: str, body: bytes) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.times > 0 and rule.matches(method, path, body):
                    rule.times -= 1
                    return rule
        return None

    def intercept(self, method: str, path: str, body: bytes) -> tuple[int, bytes] | None:
        """An answer instead of forwarding (subclasses that add a rule upstream lacks)."""
        return None

    def rewrite(self, method: str, path: str, status: int, body: bytes) -> bytes:
        """The upstream answer as the client sees it (subclasses that change what it says)."""
        return body

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: Proxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        rule = self.server.take(self.command, self.path, body)
        if rule is None and (own := self.server.intercept(self.command, self.path, body)):
            status, data = own
            self._answer(status, data, {"Content-Type": "application/json"})
            return
        if rule is not None and rule.status is not None:
            self._answer(
                rule.status, rule.body, rule.headers or {"Content-Type": "application/json"}
            )
            return
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
        }
        upstream = self.server.http.request(
            self.command,
            self.server.upstream + self.path,
            body=body,
            headers=headers,
            retries=False,
        )
        if rule is not None and rule.delay:
            time.sleep(rule.delay)
        answer_headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding", "connection")
        }
        # The client may have given up waiting: that was the point.
        data = self.server.rewrite(self.command, self.path, upstream.status, upstream.data)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(upstream.status, data, answer_headers)

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

"""A local fake of Azure Resource Manager for AKS agent pools, over HTTPS (a throwaway CA).

Strict where ARM is (azure-mgmt-containerservice 41 REST shapes; Microsoft Learn "Troubleshoot
OperationNotAllowed" and "Troubleshoot ZonalAllocationFailed, AllocationFailed or
OverconstrainedAllocationRequest"):
- a bearer token on every call; 404 for a missing pool; 400 for a bad name or body;
- PUT answers 201 (or 200) with Azure-AsyncOperation, DELETE 202 (or 204); the operation runs for
  a few requests (time passes with each), the pool Creating/Updating/Deleting meanwhile;
- a second PUT or DELETE of a pool while its operation runs is 409 OperationNotAllowed: "Operation
  is not allowed: Another agentpool operation (<pool> - Creating) is in progress, please wait for
  it to finish before starting a new operation. See https://aka.ms/aks-pending-operation for more
  details";
- capacity refusals nest their code in error.details under a generic top-level code
  (ResourceOperationFailure / AllocationFailed in details), as scripted by Failure(details=...);
- listClusterUserCredential gives a kubeconfig with the server and its CA.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trustme

_POOL = (
    r"/subscriptions/(?P<s>[^/]+)/resourceGroups/(?P<g>[^/]+)/providers/"
    r"Microsoft\.ContainerService/managedClusters/(?P<c>[^/]+)/agentPools(?:/(?P<n>[^/]+))?"
)


_CLUSTER = (
    r"/subscriptions/(?P<s>[^/]+)/resourceGroups/(?P<g>[^/]+)/providers/"
    r"Microsoft\.ContainerService/managedClusters/(?P<c>[^/]+)"
)
_CREDENTIAL = (
    r"/subscriptions/(?P<s>[^/]+)/resourceGroups/(?P<g>[^/]+)/providers/"
    r"Microsoft\.ContainerService/managedClusters/(?P<c>[^/]+)/listClusterUserCredential"
)


@dataclass
class Failure:
    method: str
    suffix: str
    status: int = 0
    code: str = ""
    message: str = ""
    headers: dict[str, str] | None = None
    operation_error: tuple[str, str] | None = None  # (code, message): the async operation fails
    details: list[dict[str, str]] | None = None  # nested errors (capacity codes live here)


class ArmFake(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, workdir: Path, polls_to_done: int = 2) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = workdir / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.polls_to_done = polls_to_done
        self.ca_base64 = base64.b64encode(ca.cert_pem.bytes()).decode()
        self.pools: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, list[Any]] = {}  # id -> [polls left, resource path, kind, error]
        self.failures: list[Failure] = []
        self.tokens: list[str] = []
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"

    def fail(self, failure: Failure) -> None:
        with self.lock:
            self.failures.append(failure)

    def advance(self) -> None:
        """Time passes with every request: running operations move on and end."""
        for op_id, op in list(self.operations.items()):
            if op[0] > 0:
                op[0] -= 1
            if op[0] <= 0:
                self.finish(op_id)

    def finish(self, op_id: str) -> None:
        op = self.operations[op_id]
        if op[0] < 0:
            return  # finished already
        op[0] = -1
        _, resource, kind, failed = op
        pool = self.pools.get(resource)
        if failed is not None:
            if pool is not None:
                pool["properties"]["provisioningState"] = "Failed"
        elif kind == "delete":
            self.pools.pop(resource, None)
        elif pool is not None:
            pool["properties"]["provisioningState"] = "Succeeded"

    def running(self, resource: str) -> str | None:
        """The state of the operation running on `resource`, if one is."""
        for _, path, kind, _ in (op for op in self.operations.values() if op[0] >= 0):
            if path == resource:
                return "Deleting" if kind == "delete" else "Creating"
        return None

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: ArmFake

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        details: list[dict[str, str]] | None = None,
    ) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if details:
            error["details"] = details
        self._send(status, {"error": error}, headers)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        server = self.server
        with server.lock:
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Bearer "):
                self._error(401, "AuthenticationFailed", "missing bearer token")
                return
            server.tokens.append(auth.removeprefix("Bearer "))
            server.advance()
            failure = next(
                (
                    f
                    for f in server.failures
                    if f.method == self.command and url.path.endswith(f.suffix)
                ),
                None,
            )
            if failure is not None:
                server.failures.remove(failure)
                if failure.status:
                    self._error(
                        failure.status,
                        failure.code,
                        failure.message,
                        failure.headers,
                        failure.details,
                    )
                    return
            self._route(url.path, url.query, body, failure.operation_error if failure else None)

    def _operation(self, path: str, kind: str, error: tuple[str, str] | None) -> str:
        op_id = f"op-{next(self.server._ids)}"
        self.server.operations[op_id] = [self.server.polls_to_done, path, kind, error]
        return f"{self.server.url}/operations/{op_id}?api-version=2025-01-01"

    def _route(
        self, path: str, query: str, body: dict[str, Any], error: tuple[str, str] | None
    ) -> None:
        server = self.server
        if m := re.fullmatch(r"/operations/(?P<id>[^/]+)", path):
            op = server.operations.get(m["id"])
            if op is None:
                self._error(404, "NotFound", "no such operation")
                return
            if op[0] > 0:
                self._send(200, {"status": "InProgress"})
                return
            server.finish(m["id"])
            failed = op[3]
            if failed is not None:
                self._send(
                    200, {"status": "Failed", "error": {"code": failed[0], "message": failed[1]}}
                )
                return
            self._send(200, {"status": "Succeeded"})
            return
        if (m := re.fullmatch(_CREDENTIAL, path)) and self.command == "POST":
            # listClusterUserCredential: kubeconfigs, base64 in JSON (CredentialResults).
            config = (
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                f"    server: https://{m['c']}-dns.hcp.eastus.azmk8s.io:443\n"
                f"    certificate-authority-data: {self.server.ca_base64}\n"
            )
            encoded = base64.b64encode(config.encode()).decode()
            self._send(200, {"kubeconfigs": [{"name": "clusterUser", "value": encoded}]})
            return
        if (m := re.fullmatch(_CLUSTER, path)) and self.command == "GET":
            self._send(
                200,
                {
                    "name": m["c"],
                    "location": "eastus",
                    "properties": {
                        "provisioningState": "Succeeded",
                        "powerState": {"code": "Running"},
                        "kubernetesVersion": "1.32.6",
                    },
                },
            )
            return
        m = re.fullmatch(_POOL, path)
        if m is None or "api-version=" not in query:
            self._error(404, "InvalidResourceType", f"no route for {path}")
            return
        if m["n"] is None:
            if self.command != "GET":
                self._error(405, "MethodNotAllowed", "collection is read-only")
                return
            prefix = path + "/"
            self._send(200, {"value": [p for k, p in server.pools.items() if k.startswith(prefix)]})
            return
        name = m["n"]
        pool = server.pools.get(path)
        if self.command == "GET":
            if pool is None:
                self._error(404, "NotFound", f"Agent pool {name} was not found.")
            else:
                self._send(200, pool)
        elif self.command in ("PUT", "DELETE") and (doing := server.running(path)):
            self._error(
                409,
                "OperationNotAllowed",
                f"Operation is not allowed: Another agentpool operation ({name} - {doing}) is in "
                "progress, please wait for it to finish before starting a new operation. See "
                "https://aka.ms/aks-pending-operation for more details",
            )
        elif self.command == "PUT":
            if not re.fullmatch(r"[a-z][a-z0-9]{0,11}", name):
                self._error(400, "InvalidParameter", f"Agent pool name {name!r} is invalid.")
                return
            props = dict(body.get("properties") or {})
            if not props.get("vmSize") or int(props.get("count", -1)) < 0:
                self._error(400, "InvalidParameter", "vmSize and count are required.")
                return
            created = pool is None
            props["provisioningState"] = "Creating" if created else "Updating"
            server.pools[path] = {
                "id": path,
                "name": name,
                "type": "Microsoft.ContainerService/managedClusters/agentPools",
                "properties": props,
            }
            self._send(
                201 if created else 200,
                server.pools[path],
                {"Azure-AsyncOperation": self._operation(path, "put", error)},
            )
        elif self.command == "DELETE":
            if pool is None:
                self._send(204)
                return
            pool["properties"]["provisioningState"] = "Deleting"
            op_url = self._operation(path, "delete", error)
            self._send(202, None, {"Azure-AsyncOperation": op_url, "Location": op_url})
        else:
            self._error(405, "MethodNotAllowed", self.command)

    do_GET = do_PUT = do_DELETE = do_POST = _handle

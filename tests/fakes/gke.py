"""A local fake of the GKE REST API (container.googleapis.com/v1) for node pools and operations.

Strict where the real service is (google/cloud/container_v1 types; hashicorp/terraform-provider-
google, which meets GKE's refusals every day):
- the `parent`/`name` paths, 409 ALREADY_EXISTS on a duplicate node pool, 404, 400 on a bad size;
- a regional cluster (three zones): a pool without `locations` spans all of them, and its
  `initialNodeCount` is per zone (NodePool.initial_node_count; TPG container_node_pool docs: "the
  number of nodes per zone");
- accelerator-optimized machines (a2, a3, g2) need their GPUs listed with the count the machine
  has (TPG acceptance tests: a2-highgpu-1g with nvidia-tesla-a100 x1, a3 with x8);
- GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule itself, and a second such taint is 400
  "Found more than one taint with key nvidia.com/gpu and effect NO_SCHEDULE." (TPG #7928);
- one node-pool operation at a time per cluster: another is 400 FAILED_PRECONDITION "Operation
  ... is currently creating a node pool for cluster ... Please wait and try again once it is done."
  (TPG #975, #10366); 429 "Too many operations" is scripted (TPG #15205);
- operations run for a few requests before they are DONE (time passes with each request), node
  pools PROVISIONING or RECONCILING meanwhile, STOPPING while deleted, enums as integers;
- a stockout leaves the pool RUNNING_WITH_ERROR with a GCE_STOCKOUT condition (TPG #10121,
  #10823), as `Failure(stockout=True)` scripts it.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

POOL_STATUS = {
    "PROVISIONING": 1,
    "RUNNING": 2,
    "RUNNING_WITH_ERROR": 3,
    "RECONCILING": 4,
    "STOPPING": 5,
    "ERROR": 6,
}
OP_STATUS = {"PENDING": 1, "RUNNING": 2, "DONE": 3}
HTTP_STATUS = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_CLUSTER = r"/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/clusters/(?P<c>[^/]+)"
CLUSTER_ZONES = ["europe-west4-a", "europe-west4-b", "europe-west4-c"]
STOCKOUT = 1  # StatusCondition.Code GCE_STOCKOUT
# GPUs built into accelerator-optimized machines: the count their accelerators must state.
BUILT_IN_GPUS = {"g2-standard-24": 2, "g2-standard-48": 4, "g2-standard-96": 8}


def built_in_gpus(machine: str) -> int | None:
    if machine.startswith("g2-standard-"):
        return BUILT_IN_GPUS.get(machine, 1)
    if m := re.fullmatch(r"a[234]-(?:high|mega|ultra|edge)gpu-(\d+)g", machine):
        return int(m[1])
    return None


def refusal(pool: dict[str, Any]) -> str | None:
    """Why GKE refuses this new node pool (400), or None."""
    config = pool.get("config") or {}
    accelerators = config.get("accelerators") or []
    wanted = built_in_gpus(str(config.get("machineType", "")))
    stated = sum(int(a.get("acceleratorCount", 0)) for a in accelerators)
    if wanted is not None and stated != wanted:
        return (
            f"Accelerator count {stated} does not match machine type {config.get('machineType')}"
            f" ({wanted} GPUs)."
        )
    taints = [(t.get("key"), t.get("effect")) for t in config.get("taints") or []]
    if accelerators:
        taints.append(("nvidia.com/gpu", 1))  # the one GKE adds (effect NO_SCHEDULE = 1)
    for key, effect in set(taints):
        if taints.count((key, effect)) > 1:
            names = {1: "NO_SCHEDULE", 2: "PREFER_NO_SCHEDULE", 3: "NO_EXECUTE"}
            return (
                f"Found more than one taint with key {key} and effect {names.get(effect, effect)}."
            )
    if not set(pool.get("locations") or []) <= set(CLUSTER_ZONES):
        return f"Node pool locations {pool.get('locations')} are not in the cluster's locations."
    return None


@dataclass
class Failure:
    method: str
    suffix: str  # matched against the end of the path (before the query)
    status: int = 0  # an HTTP error ...
    message: str = ""
    operation_error: tuple[int, str] | None = None  # ... or an operation that fails this way
    headers: dict[str, str] | None = None
    stockout: bool = False  # ... or a pool left RUNNING_WITH_ERROR for want of GPUs


class GkeFake(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, polls_to_done: int = 2) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.polls_to_done = polls_to_done
        self.ca_base64 = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nGKE\n").decode()
        self.pools: dict[str, dict[str, Any]] = {}  # full name -> NodePool JSON
        self.operations: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, tuple[int, str, str, tuple[int, str] | None]] = {}
        self.stockouts: set[str] = set()  # pools whose create runs out of GPUs
        self.failures: list[Failure] = []
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fail(self, failure: Failure) -> None:
        with self.lock:
            self.failures.append(failure)

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    # -- operations --

    def start_operation(
        self, location_path: str, op_type: str, target: str, error: tuple[int, str] | None
    ) -> dict[str, Any]:
        name = f"{location_path}/operations/operation-{next(self._ids)}"
        op = {
            "name": name.split("/")[-1],
            "selfLink": name,
            "operationType": op_type,
            "status": OP_STATUS["RUNNING"],
            "targetLink": target,
        }
        self.operations[name] = op
        self.pending[name] = (self.polls_to_done, target, op_type, error)
        return op

    def poll(self, name: str) -> dict[str, Any]:
        op = self.operations[name]
        if name in self.pending:
            left, target, op_type, error = self.pending[name]
            if left > 1:
                self.pending[name] = (left - 1, target, op_type, error)
            else:
                del self.pending[name]
                op["status"] = OP_STATUS["DONE"]
                self._finish(target, op_type, error, op)
        return op

    def advance(self) -> None:
        """Time passes with every request: running operations move on."""
        for name in list(self.pending):
            self.poll(name)

    def busy(self) -> str | None:
        """The running node-pool operation of the cluster, if one is."""
        return next(iter(self.pending), None)

    def _finish(
        self, target: str, op_type: str, error: tuple[int, str] | None, op: dict[str, Any]
    ) -> None:
        pool = self.pools.get(target)
        if target in self.stockouts and pool is not None:
            self.stockouts.discard(target)
            message = (
                "Google Compute Engine: Not all instances running in IGM. Current errors: "
                "[GCE_STOCKOUT]: The zone does not have enough resources available to fulfill "
                "the request."
            )
            op["error"] = {"code": 8, "message": message}
            pool["status"] = POOL_STATUS["RUNNING_WITH_ERROR"]
            pool["conditions"] = [{"code": STOCKOUT, "message": message, "canonicalCode": 8}]
            return
        if error is not None:
            op["error"] = {"code": error[0], "message": error[1]}
            op["statusMessage"] = error[1]
            if pool is not None:
                pool["status"] = POOL_STATUS["ERROR"]
                pool["statusMessage"] = error[1]
            return
        if op_type == "DELETE_NODE_POOL":
            self.pools.pop(target, None)
        elif pool is not None:
            pool["status"] = POOL_STATUS["RUNNING"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: GkeFake

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._send(
            status,
            {
                "error": {
                    "code": status,
                    "message": message,
                    "status": HTTP_STATUS.get(status, "UNKNOWN"),
                }
            },
            headers,
        )

    def _handle(self) -> None:
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        server = self.server
        with server.lock:
            server.advance()
            server.requests.append((self.command, path))
            failure = next(
                (
                    f
                    for f in server.failures
                    if f.method == self.command and path.endswith(f.suffix)
                ),
                None,
            )
            if failure is not None:
                server.failures.remove(failure)
                if failure.status:
                    self._error(failure.status, failure.message, failure.headers)
                    return
            self._route(
                path,
                body,
                failure.operation_error if failure else None,
                bool(failure and failure.stockout),
            )

    def _route(
        self,
        path: str,
        body: dict[str, Any],
        op_error: tuple[int, str] | None,
        failure_stockout: bool = False,
    ) -> None:
        server = self.server
        if m := re.fullmatch(
            r"/v1/(?P<loc>projects/[^/]+/locations/[^/]+)/operations/(?P<op>[^/]+)", path
        ):
            name = f"{m['loc']}/operations/{m['op']}"
            if name not in server.operations:
                self._error(404, f"Operation {name} not found.")
                return
            self._send(200, server.poll(name))
            return
        if (m := re.fullmatch(_CLUSTER, path)) and self.command == "GET":
            # The cluster: its endpoint and CA, as container.v1 Cluster carries them.
            self._send(
                200,
                {
                    "name": m["c"],
                    "endpoint": "203.0.113.10",
                    "masterAuth": {"clusterCaCertificate": server.ca_base64},
                    "status": 2,
                },
            )
            return
        m = re.fullmatch(_CLUSTER + r"/nodePools(?:/(?P<n>[^/:]+))?(?P<verb>:setSize)?", path)
        if m is None or (m["p"], m["l"], m["c"]) != ("ml-burst", "europe-west4", "burst-euw4"):
            self._error(404, f"Not found: {path}")
            return
        location = f"projects/{m['p']}/locations/{m['l']}"
        parent = f"{location}/clusters/{m['c']}"
        if m["n"] is None:
            if self.command == "GET":
                self._send(200, {"nodePools": list(server.pools.values())})
            elif self.command == "POST":
                new: dict[str, Any] = dict(body.get("nodePool") or {})
                name = new.get("name", "")
                if not re.fullmatch(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?", name):
                    self._error(400, f"Invalid node pool name {name!r}.")
                    return
                full = f"{parent}/nodePools/{name}"
                if full in server.pools:
                    self._error(409, f"Node pool {name} already exists.")
                    return
                if self._busy(m["c"], "creating"):
                    return
                why = refusal(new)
                if why is not None:
                    self._error(400, why)
                    return
                new.setdefault("locations", list(CLUSTER_ZONES))
                new.update(status=POOL_STATUS["PROVISIONING"], selfLink=full)
                server.pools[full] = new
                if failure_stockout:
                    server.stockouts.add(full)
                self._send(
                    200, server.start_operation(location, "CREATE_NODE_POOL", full, op_error)
                )
            else:
                self._error(405, "method not allowed")
            return
        full = f"{parent}/nodePools/{m['n']}"
        pool = server.pools.get(full)
        if pool is None:
            self._error(404, f'Node pool "{m["n"]}" not found.')
            return
        if self.command in ("POST", "DELETE") and self._busy(
            m["c"], "deleting" if self.command == "DELETE" else "resizing"
        ):
            return
        if m["verb"] == ":setSize" and self.command == "POST":
            count = int(body.get("nodeCount", -1))
            if count < 0:
                self._error(400, "nodeCount must be >= 0")
                return
            pool["initialNodeCount"] = count
            pool["status"] = POOL_STATUS["RECONCILING"]
            self._send(200, server.start_operation(location, "SET_NODE_POOL_SIZE", full, op_error))
        elif self.command == "GET":
            self._send(200, pool)
        elif self.command == "DELETE":
            pool["status"] = POOL_STATUS["STOPPING"]
            self._send(200, server.start_operation(location, "DELETE_NODE_POOL", full, op_error))
        else:
            self._error(405, "method not allowed")

    def _busy(self, cluster: str, doing: str) -> bool:
        """Refuse a node-pool mutation while another runs on the cluster (400 FAILED_PRECONDITION)."""
        running = self.server.busy()
        if running is None:
            return False
        op = running.split("/")[-1]
        self._send(
            400,
            {
                "error": {
                    "code": 400,
                    "message": f"Operation {op} is currently {doing} a node pool for cluster "
                    f"{cluster}. Please wait and try again once it is done.",
                    "status": "FAILED_PRECONDITION",
                }
            },
        )
        return True

    do_GET = do_POST = do_DELETE = _handle

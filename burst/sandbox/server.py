"""The sandbox's HTTP front: Kubernetes API paths, verbs, query parameters and response shapes.

The official `kubernetes` client and kubectl talk to it unchanged. Routing covers the core group
(`/api/v1/...`) and named groups (`/apis/GROUP/VERSION/...`), namespaced and cluster-scoped,
collections and objects, the `status` and `binding` subresources, list/watch with selectors,
`limit`/`continue`, watch resume and bookmarks, and optional bearer-token authentication.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from burst.sandbox import resources
from burst.sandbox.errors import ApiError
from burst.sandbox.resources import BY_PATH, Resource
from burst.sandbox.store import Store

HEALTH_PATHS = {"/healthz", "/readyz", "/livez"}


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        store: Store,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        authenticate: Callable[[str], bool] | None = None,
        bookmark_every: float = 1.0,
    ) -> None:
        super().__init__((host, port), _Handler)
        self.store = store
        self.token = token
        self.authenticate = (
            authenticate  # a token webhook: what the cluster's authenticator accepts
        )
        self.bookmark_every = bookmark_every
        self.stopping = threading.Event()
        # Frozen: connections are accepted and nothing is answered, as from an API server that
        # hangs (or a half-open connection); requests and open watches wait until it thaws.
        self.thawed = threading.Event()
        self.thawed.set()

    def freeze(self) -> None:
        self.thawed.clear()

    def thaw(self) -> None:
        self.thawed.set()

    def wait_thawed(self) -> None:
        while not self.thawed.wait(0.1):
            if self.stopping.is_set():
                return

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-request (a closed watch, a dropped keep-alive connection) is
        # ordinary here; anything else is a bug worth its traceback.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


def _route(path: str) -> tuple[Resource, str, str | None, str | None] | None:
    """(resource, namespace, name, subresource) for a resource path, None for anything else."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    res = BY_PATH.get((group, version, rest[0]))
    if res is None:
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({path})"
        )
    if namespace and not res.namespaced:
        raise ApiError(404, "NotFound", f"{res.plural} are not namespaced")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3 or (sub is not None and sub not in ("status", "binding")):
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({path})"
        )
    return res, namespace, name, sub


def discovery(path: str) -> Any:
    """The discovery and version documents clients read before they call the API."""
    path = path.rstrip("/")
    if path == "/version":
        return resources.VERSION_INFO
    if path == "/api":
        return resources.api_versions()
    if path == "/apis":
        return resources.api_group_list()
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["openapi", "v3"]:
        if len(parts) == 2:
            return resources.openapi_v3_root()
        found = resources.openapi_v3("/".join(parts[3:]))
        if found is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        return found
    if parts == ["api", "v1"]:
        return resources.resource_list("v1")
    if len(parts) == 3 and parts[0] == "apis":
        found = resources.resource_list(f"{parts[1]}/{parts[2]}")
        if found is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        return found
    if len(parts) == 2 and parts[0] == "apis":
        group = next(
            (g for g in resources.api_group_list()["groups"] if g["name"] == parts[1]), None
        )
        if group is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        return {"kind": "APIGroup", "apiVersion": "v1", **group}
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm and delayed ACKs every
    # keep-alive request would stall ~40 ms.
    disable_nagle_algorithm = True
    server: ApiServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the sandbox is quiet; tests and `burst sandbox up` report what matters

    # -- plumbing --

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            if "yaml" in (self.headers.get("Content-Type") or ""):
                raise ApiError(
                    415, "UnsupportedMediaType", "server-side apply is not supported"
                ) from None
            raise ApiError(400, "BadRequest", "the request body is not valid JSON") from None

    def _authorized(self) -> bool:
        token, check = self.server.token, self.server.authenticate
        if token is None and check is None:
            return True
        header = self.headers.get("Authorization") or ""
        given = header.removeprefix("Bearer ") if header.startswith("Bearer ") else None
        return given is not None and (given == token or (check is not None and check(given)))

    def _dispatch(self, method: str) -> None:
        try:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if url.path in HEALTH_PATHS:
                self._send_text("ok")
                return
            if not self._authorized():
                raise ApiError(401, "Unauthorized", "Unauthorized")
            document = discovery(url.path) if method == "GET" else None
            if document is not None:
                self._send(200, document)
                return
            route = _route(url.path)
            if route is None:
                raise ApiError(
                    404,
                    "NotFound",
                    f"the server could not find the requested resource ({url.path})",
                )
            self._resource(method, *route, query)
        except ApiError as exc:
            self._send(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _manager(self) -> str:
        """The field manager of a write: the client's User-Agent up to its first `/`
        (apiserver pkg/endpoints/handlers/rest.go prefixFromUserAgent)."""
        agent = self.headers.get("User-Agent") or "unknown"
        return agent.split("/")[0] or "unknown"

    def _send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # -- resources --

    def _resource(
        self,
        method: str,
        res: Resource,
        namespace: str,
        name: str | None,
        sub: str | None,
        query: dict[str, str],
    ) -> None:
        store = self.server.store
        if name is None:
            if method == "GET" and query.get("watch") in ("true", "1"):
                serve_watch(self, res, namespace, query)
            elif method == "GET":
                self._list(res, namespace, query)
            elif method == "POST":
                body = self._body()
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "expected an object")
                self._send(201, store.create(res, namespace, body, self._manager()))
            elif method == "DELETE":
                items, _, _, _ = store.list_items(
                    res, namespace, query.get("labelSelector"), query.get("fieldSelector")
                )
                options = self._body() or {}
                for obj in items:
                    store.delete(
                        res,
                        obj["metadata"].get("namespace", ""),
                        obj["metadata"]["name"],
                        query.get("propagationPolicy") or options.get("propagationPolicy"),
                    )
                self._send(
                    200, self._list_body(res, items, str(store.resource_version), None, None)
                )
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
            return
        if sub == "binding":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "binding takes POST")
            body = self._body() or {}
            target = (body.get("target") or {}).get("name")
            if not target:
                raise ApiError(422, "Invalid", "binding needs target.name")
            store.bind(namespace, name, target)
            self._send(
                201,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "code": 201,
                },
            )
            return
        status = sub == "status"
        if status and not res.status:
            raise ApiError(404, "NotFound", f"{res.plural} have no status subresource")
        if method == "GET":
            self._send(200, store.get(res, namespace, name))
        elif method == "PUT":
            body = self._body()
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "expected an object")
            self._send(
                200,
                store.replace(res, namespace, name, body, status=status, manager=self._manager()),
            )
        elif method == "PATCH":
            content_type = self.headers.get("Content-Type") or ""
            self._send(
                200,
                store.patch(
                    res,
                    namespace,
                    name,
                    content_type,
                    self._body(),
                    status=status,
                    manager=self._manager(),
                ),
            )
        elif method == "DELETE":
            options = self._body() or {}
            pre = options.get("preconditions") or {}
            propagation = query.get("propagationPolicy") or options.get("propagationPolicy")
            if propagation is None and options.get("orphanDependents") is not None:
                propagation = "Orphan" if options["orphanDependents"] else "Background"
            self._send(
                200,
                store.delete(
                    res, namespace, name, propagation, pre.get("uid"), pre.get("resourceVersion")
                ),
            )
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed")

    @staticmethod
    def _list_body(
        res: Resource, items: list[Any], rv: str, cont: str | None, remaining: int | None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": rv}
        if cont:
            meta["continue"] = cont
            meta["remainingItemCount"] = remaining
        if res.builtin:
            # The items of a built-in list carry no kind or apiVersion: the list's own say what
            # they are (kubernetes/kubernetes#3030, #63676, #98925; kubernetes-client/python#1617).
            # Custom resources are served as stored, TypeMeta included.
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": meta,
            "items": items,
        }

    def _list(self, res: Resource, namespace: str, query: dict[str, str]) -> None:
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", "limit must be a number") from None
        items, rv, cont, remaining = self.server.store.list_items(
            res,
            namespace,
            query.get("labelSelector"),
            query.get("fieldSelector"),
            limit,
            query.get("continue"),
        )
        self._send(200, self._list_body(res, items, rv, cont, remaining))

    def do_GET(self) -> None:
        self.server.wait_thawed()
        self._dispatch("GET")

    def do_POST(self) -> None:
        self.server.wait_thawed()
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self.server.wait_thawed()
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self.server.wait_thawed()
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self.server.wait_thawed()
        self._dispatch("DELETE")


def serve_watch(handler: _Handler, res: Resource, namespace: str, query: dict[str, str]) -> None:
    """A watch as a stream of JSON lines, chunked; bookmarks when asked for."""
    try:
        timeout = float(query.get("timeoutSeconds") or 1800)
    except ValueError:
        raise ApiError(400, "BadRequest", "timeoutSeconds must be a number") from None
    rv = query.get("resourceVersion")
    if rv and not rv.isdigit():
        raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv!r}")
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    stream = handler.server.store.watch(
        res,
        namespace,
        query.get("resourceVersion"),
        query.get("labelSelector"),
        query.get("fieldSelector"),
        handler.server.stopping,
        timeout,
        handler.server.bookmark_every if bookmarks else None,
    )
    handler.send_response(HTTPStatus.OK)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    try:
        for type_, obj in stream:
            handler.server.wait_thawed()
            line = (
                json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"
            )
            handler.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            handler.wfile.flush()
        handler.server.wait_thawed()
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    handler.close_connection = True

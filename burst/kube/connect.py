"""Connections to clusters, each call with a deadline. The official client waits for ever on a
half-open connection unless a call says `_request_timeout` (kubernetes-client/python#1148), so a
frozen API server would freeze the watch, a pass or the leader's renewals with it: every client
burst makes sets one by default (connect, read), and watches set their own, a little past the
server-side `timeoutSeconds` they ask for."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from burst.model import ClusterAccess

CONNECT_S, READ_S = 5.0, 30.0


class TimedApiClient(client.ApiClient):
    """An ApiClient whose calls time out unless they ask for a timeout of their own."""

    def __init__(self, configuration: Any, timeout: tuple[float, float] = (CONNECT_S, READ_S)):
        super().__init__(configuration)
        self.timeout = timeout

    def call_api(
        self,
        method: Any,
        url: Any,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        return super().call_api(
            method, url, header_params, body, post_params, _request_timeout or self.timeout
        )


def watch_timeout(server_seconds: int) -> tuple[float, float]:
    """A watch's own deadline: the server closes it after `server_seconds` (and sends bookmarks
    meanwhile); a connection silent for that long again, at most 15 s more, is taken for dead."""
    return (CONNECT_S, server_seconds + min(15.0, float(server_seconds)))


def cloud_client(
    access: ClusterAccess,
    now: Callable[[], datetime],
    timeout: tuple[float, float] = (CONNECT_S, READ_S),
) -> TimedApiClient:
    """A client of a cloud cluster that authenticates with the cloud's own tokens: fetched when
    the last one is about to expire, before the request that would carry it."""
    configuration = client.Configuration(host=access.host)
    if access.ca_pem:
        configuration.ca_cert_data = access.ca_pem.decode()
    configuration.api_key_prefix["authorization"] = "Bearer"
    configuration.api_key["authorization"] = ""  # the client asks the hook only once one is set
    expires = [datetime.min.replace(tzinfo=UTC)]

    def refresh(config: Any) -> None:
        if now() >= expires[0]:
            token, expires[0] = access.token()
            config.api_key["authorization"] = token

    setattr(configuration, "refresh_api_key_hook", refresh)  # noqa: B010 (typed None upstream)
    return TimedApiClient(configuration, timeout)

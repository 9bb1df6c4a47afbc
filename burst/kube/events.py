"""Kubernetes Events on the user's workload: what `kubectl describe` shows about burst's doings.

The watch (malformed annotations), replication (refusals, dispatch) and sync (remote progress)
steps record through an EventRecorder. The same (object, reason, message) is recorded once, so a
loop that looks again every few seconds does not flood the namespace; the last REMEMBERED are
remembered, so that a service running for months does not grow with every Event it sent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Literal

from burst.clock import Clock

COMPONENT = "burst"
REMEMBERED = 50_000


class EventRecorder:
    def __init__(self, api_client: Any, clock: Clock, component: str = COMPONENT) -> None:
        self._api, self._clock, self._component = api_client, clock, component
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def record(
        self, obj: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str
    ) -> bool:
        """Record an Event on `obj` (a Job, PyTorchJob...). False if it was recorded before."""
        from kubernetes import client

        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid")), reason, message)
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)
        now = self._clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {
            "metadata": {"generateName": f"{meta.get('name', 'burst')}."},
            "involvedObject": {
                "kind": obj.get("kind"),
                "apiVersion": obj.get("apiVersion"),
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": self._component,
        }
        # Sent as it is and the answer left unread: the client's models cost more CPU than the
        # call itself, and a thousand dispatches record a thousand Events.
        try:
            client.CoreV1Api(self._api).create_namespaced_event(
                meta.get("namespace", "default"), body, _preload_content=False
            )
        except Exception:
            # Not taken (or not known to be): forgotten, so that the next look sends it. One the
            # server took before its answer was lost is sent twice, which says it once too often
            # rather than never.
            with self._lock:
                self._seen.pop(key, None)
            raise
        return True

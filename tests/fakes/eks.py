"""EKS where moto is silent: a thin layer in front of a moto server that makes managed node groups
take time and fail as EKS's do. moto keeps the node groups; this layer changes what DescribeNodegroup
says about them and refuses what EKS refuses.

Rules, each from botocore's EKS service model (`botocore/data/eks/2017-11-01/service-2.json`) and
the EKS User Guide:
- A new node group is `CREATING` for a while before `ACTIVE` (moto makes it ACTIVE at once).
- UpdateNodegroupConfig starts an update: the node group is `UPDATING` until it ends, and a second
  update meanwhile is refused with 409 `ResourceInUseException`.
- EC2 capacity never comes back as an API error: the node group stays `CREATING` (or `UPDATING`)
  with `health.issues` such as `AsgInstanceLaunchFailures`, then ends `CREATE_FAILED` (issue codes:
  `NodegroupIssueCode`; example message from terraform-aws-modules/terraform-aws-eks#2149).
- `DEGRADED` is a health problem beside running nodes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.fakes.proxy import Proxy

_NODEGROUP = re.compile(r"^/clusters/(?P<c>[^/]+)/node-groups/(?P<n>[^/?]+)(?P<rest>/[^?]*)?")


@dataclass
class Script:
    """What the layer says about one node group."""

    creating: int = 1  # describes left showing CREATING
    updating: int = 0  # describes left showing UPDATING
    launch_failure: str | None = None  # an AsgInstanceLaunchFailures message, once set
    failing: int = 2  # describes showing the issue while CREATING before CREATE_FAILED
    degraded: bool = False
    failed: bool = False


class EksLayer(Proxy):
    def __init__(self, upstream: str, creating: int = 1, updating: int = 2) -> None:
        super().__init__(upstream)
        self.creating, self.updating = creating, updating
        self.scripts: dict[str, Script] = {}

    def script(self, name: str) -> Script:
        with self.lock:
            return self.scripts.setdefault(name, Script(creating=self.creating))

    def intercept(self, method: str, path: str, body: bytes) -> tuple[int, bytes] | None:
        m = _NODEGROUP.match(path)
        if m is None or method != "POST" or m["rest"] != "/update-config":
            return None
        s = self.script(m["n"])
        if s.updating > 0 or s.creating > 0:
            return 409, json.dumps(
                {
                    "__type": "ResourceInUseException",
                    "message": f"Nodegroup {m['n']} in cluster {m['c']} has an update in progress",
                    "clusterName": m["c"],
                    "nodegroupName": m["n"],
                }
            ).encode()
        s.updating = self.updating
        return None

    def rewrite(self, method: str, path: str, status: int, body: bytes) -> bytes:
        m = _NODEGROUP.match(path)
        if m is None or method != "GET" or m["rest"] or status != 200:
            return body
        answer = json.loads(body)
        nodegroup = answer["nodegroup"]
        s = self.script(m["n"])
        if s.failed:
            status_now = "CREATE_FAILED"
        elif s.creating > 0:
            status_now = "CREATING"
            if s.launch_failure is None:
                s.creating -= 1
            elif s.failing > 0:
                s.failing -= 1
            else:
                status_now, s.failed = "CREATE_FAILED", True
        elif s.updating > 0:
            status_now = "UPDATING"  # back to ACTIVE when it ends, failed or not
            s.updating -= 1
        else:
            status_now = "DEGRADED" if s.degraded else nodegroup["status"]
        issues: list[dict[str, Any]] = []
        if s.launch_failure is not None and status_now != "ACTIVE":
            issues.append(
                {
                    "code": "AsgInstanceLaunchFailures",
                    "message": s.launch_failure,
                    "resourceIds": [f"eks-{m['n']}-asg"],
                }
            )
        if s.degraded:
            issues.append(
                {
                    "code": "Ec2SecurityGroupNotFound",
                    "message": "We couldn't find one or more security groups.",
                    "resourceIds": ["sg-0"],
                }
            )
        nodegroup["status"] = status_now
        nodegroup["health"] = {"issues": issues}
        return json.dumps(answer).encode()

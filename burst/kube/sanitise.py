"""Sanitise a pod template for a shared cloud cluster: an allow-list, not a deny-list.

Pure; translate.py calls it for every pod template of a workload. The copy keeps only fields known
to be safe there, modelled on the Pod Security Standards (kubernetes/pod-security-admission
policy/check_*.go: every baseline check, and restricted's volume types, privilege escalation and
capabilities; running as root stays allowed, as ML images mostly do). Anything else is refused
naming its path, or stripped where that is safe (the note says so, and replicate.py puts it in an
Event on the user's job). Every Secret reference a pod spec can hold (kubernetes
pkg/api/v1/pod/util.go VisitPodSecretNames: env, envFrom, imagePullSecrets and every volume
source) is checked against the policy's list, and images against its registries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

# What the copy may keep as it is, or after the checks below.
POD_FIELDS = frozenset(
    {
        "containers", "initContainers", "restartPolicy", "terminationGracePeriodSeconds",
        "activeDeadlineSeconds", "volumes", "securityContext", "tolerations", "nodeSelector",
        "affinity", "dnsPolicy", "dnsConfig", "hostname", "subdomain", "setHostnameAsFQDN",
        "enableServiceLinks", "hostAliases", "os", "shareProcessNamespace", "hostUsers",
        "imagePullSecrets", "serviceAccountName", "serviceAccount", "automountServiceAccountToken",
        "schedulerName", "priorityClassName", "priority", "preemptionPolicy",
        "topologySpreadConstraints", "readinessGates", "overhead", "hostNetwork", "hostPID",
        "hostIPC",
    }
)  # fmt: skip
# Fields refused whatever their value, with why.
REFUSED = {
    "nodeName": "it names an on-prem node: the copy would run outside its pool",
    "runtimeClassName": "runtime classes are the on-prem cluster's",
    "ephemeralContainers": "debug containers are not sent",
    "resourceClaims": "resource claims name on-prem devices",
    "schedulingGates": "nothing there would lift the gates: the copy would never be scheduled",
}
CONTAINER_FIELDS = frozenset(
    {
        "name", "image", "command", "args", "workingDir", "ports", "env", "envFrom", "resources",
        "volumeMounts", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
        "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
        "stdin", "stdinOnce", "tty", "restartPolicy", "resizePolicy",
    }
)  # fmt: skip
# Pod Security Standards "restricted" volume types (policy/check_restrictedVolumes.go).
VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
     "projected", "secret"}
)  # fmt: skip
# Safe sysctls (policy/check_sysctls.go, policy version 1.32).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
    }
)  # fmt: skip
# Baseline's capabilities a container may add (check_capabilities_baseline.go), of which
# restricted keeps one.
ADDABLE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
# Node labels a cloud's nodes share with on-prem ones; every other key names on-prem nodes.
PORTABLE_NODE_LABELS = frozenset({"kubernetes.io/arch", "kubernetes.io/os"})
# Labels and annotations the copy must not carry: the local server's, and Kueue's (the remote
# Kueue would hold a copy that carries them suspended, for a queue of the on-prem cluster).
FOREIGN_PREFIXES = ("kueue.x-k8s.io/",)


@dataclass
class Checked:
    """What one template's sanitising found: references to copy, refusals, what was stripped."""

    secrets: list[str] = field(default_factory=list)
    config_maps: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    service_accounts: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    stripped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Allowed:
    """The policy's allow-lists, as the sanitiser needs them."""

    secrets: frozenset[str]
    config_maps: frozenset[str]
    registry_ok: Callable[[str], bool]
    registries: str
    service_account_token: bool


def foreign(key: str) -> bool:
    return key.startswith(FOREIGN_PREFIXES)


def sanitise_template(where: str, template: Obj, allowed: Allowed, out: Checked) -> None:
    """Check and reduce one pod template in place; `where` names it (e.g. `template`)."""
    meta = template.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        kept = {k: v for k, v in (meta.get(key) or {}).items() if not foreign(k)}
        if kept != (meta.get(key) or {}):
            out.stripped.append(f"{where}.metadata.{key}: Kueue's keys")
            meta[key] = kept
    for key, value in (meta.get("annotations") or {}).items():
        if (
            key.startswith("container.apparmor.security.beta.kubernetes.io/")
            and value not in ("runtime/default",)
            and not str(value).startswith("localhost/")
        ):
            out.refusals.append(
                f"{where}.metadata.annotations[{key}]: AppArmor {value} is not allowed"
            )
    spec = template.setdefault("spec", {})
    path = f"{where}.spec"
    for key in sorted(set(spec) - POD_FIELDS):
        why = REFUSED.get(key, "not a field burst sends to a shared cluster")
        out.refusals.append(f"{path}.{key}: {why}")
    _pod_fields(path, spec, allowed, out)
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            _container(f"{path}.{group}[{i}] (container {c.get('name', '?')})", c, allowed, out)
    for i, volume in enumerate(spec.get("volumes") or []):
        _volume(f"{path}.volumes[{i}] ({volume.get('name', '?')})", volume, allowed, out)


def _pod_fields(path: str, spec: Obj, allowed: Allowed, out: Checked) -> None:
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            out.refusals.append(f"{path}.{host}: {host} is not allowed on a burst cluster")
    if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
        out.refusals.append(
            f"{path}.schedulerName: {spec['schedulerName']} does not run there: the copy would never be scheduled"
        )
    priority = spec.get("priorityClassName")
    if priority in SYSTEM_PRIORITY_CLASSES:
        out.refusals.append(f"{path}.priorityClassName: {priority} is for cluster components")
    elif priority:
        out.stripped.append(f"{path}.priorityClassName: {priority} is an on-prem class")
    for key in ("priorityClassName", "priority", "preemptionPolicy", "overhead", "readinessGates"):
        spec.pop(key, None)  # the remote cluster's admission sets them from its own objects
    if spec.pop("topologySpreadConstraints", None):
        out.stripped.append(f"{path}.topologySpreadConstraints: the pool is one zone")
    selector = spec.get("nodeSelector") or {}
    kept = {k: v for k, v in selector.items() if k in PORTABLE_NODE_LABELS}
    if len(kept) != len(selector):
        dropped = ", ".join(sorted(set(selector) - set(kept)))
        out.stripped.append(f"{path}.nodeSelector: on-prem node labels ({dropped})")
    spec["nodeSelector"] = kept
    if (spec.get("affinity") or {}).pop("nodeAffinity", None) is not None:
        out.stripped.append(f"{path}.affinity.nodeAffinity: on-prem nodes")
    if spec.get("affinity") == {}:
        spec.pop("affinity")
    tolerations = []
    for t in spec.get("tolerations") or []:
        if not t.get("key") and t.get("operator") == "Exists":
            out.stripped.append(f"{path}.tolerations: a catch-all toleration")
        else:
            tolerations.append(t)
    spec["tolerations"] = tolerations
    _pod_security(f"{path}.securityContext", spec.get("securityContext") or {}, out)
    for i, ref in enumerate(spec.get("imagePullSecrets") or []):
        _secret(f"{path}.imagePullSecrets[{i}]", ref.get("name", ""), allowed, out)
    if spec.get("automountServiceAccountToken") and not allowed.service_account_token:
        out.refusals.append(
            f"{path}.automountServiceAccountToken: a service-account token is mounted; "
            "the policy does not allow it"
        )
    if allowed.service_account_token:
        name = spec.get("serviceAccountName") or spec.get("serviceAccount")
        if name and name != "default":
            out.service_accounts.append(name)
    else:
        spec["automountServiceAccountToken"] = False
        spec.pop("serviceAccountName", None)
        spec.pop("serviceAccount", None)


def _pod_security(path: str, context: Obj, out: Checked) -> None:
    for i, sysctl in enumerate(context.get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.refusals.append(f"{path}.sysctls[{i}]: sysctl {sysctl.get('name')} is not safe")
    _common_security(path, context, out)


def _common_security(path: str, context: Obj, out: Checked) -> None:
    """Checks the pod and each container share (seccomp, SELinux, AppArmor, Windows)."""
    if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.refusals.append(f"{path}.seccompProfile: Unconfined is not allowed")
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
        out.refusals.append(f"{path}.seLinuxOptions: only the container types are allowed")
    if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.refusals.append(f"{path}.appArmorProfile: Unconfined is not allowed")
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        out.refusals.append(f"{path}.windowsOptions.hostProcess is not allowed")


def _container(path: str, c: Obj, allowed: Allowed, out: Checked) -> None:
    for key in sorted(set(c) - CONTAINER_FIELDS):
        out.refusals.append(f"{path}.{key}: not a field burst sends to a shared cluster")
    context = c.get("securityContext") or {}
    if context.get("privileged"):
        out.refusals.append(f"{path}: privileged containers are not allowed")
    if context.get("allowPrivilegeEscalation"):
        out.refusals.append(f"{path}: allowPrivilegeEscalation is not allowed")
    added = [
        a
        for a in (context.get("capabilities") or {}).get("add") or []
        if a not in ADDABLE_CAPABILITIES
    ]
    if added:
        out.refusals.append(f"{path}: added capabilities {', '.join(added)} are not allowed")
    if context.get("procMount", "Default") != "Default":
        out.refusals.append(f"{path}.securityContext.procMount: only Default is allowed")
    _common_security(f"{path}.securityContext", context, out)
    if any(p.get("hostPort") for p in c.get("ports") or []):
        out.refusals.append(f"{path}: hostPort is not allowed")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _no_host(f"{path}.{probe}", c.get(probe) or {}, out)
    for hook in ("postStart", "preStop"):
        _no_host(f"{path}.lifecycle.{hook}", (c.get("lifecycle") or {}).get(hook) or {}, out)
    for i, mount in enumerate(c.get("volumeMounts") or []):
        if mount.get("mountPropagation") == "Bidirectional":
            out.refusals.append(
                f"{path}.volumeMounts[{i}]: Bidirectional propagation needs privilege"
            )
    if (c.get("resources") or {}).get("claims"):
        out.refusals.append(f"{path}.resources.claims: resource claims name on-prem devices")
    image = c.get("image", "")
    if not allowed.registry_ok(image):
        out.refusals.append(
            f"{path}: image {image} is not from an allowed registry ({allowed.registries})"
        )
    for i, env in enumerate(c.get("env") or []):
        ref = env.get("valueFrom") or {}
        if "secretKeyRef" in ref:
            _secret(f"{path}.env[{i}]", ref["secretKeyRef"].get("name", ""), allowed, out)
        if "configMapKeyRef" in ref:
            _config_map(f"{path}.env[{i}]", ref["configMapKeyRef"].get("name", ""), allowed, out)
    for i, source in enumerate(c.get("envFrom") or []):
        if "secretRef" in source:
            _secret(f"{path}.envFrom[{i}]", source["secretRef"].get("name", ""), allowed, out)
        if "configMapRef" in source:
            _config_map(
                f"{path}.envFrom[{i}]", source["configMapRef"].get("name", ""), allowed, out
            )


def _no_host(path: str, handler: Obj, out: Checked) -> None:
    """Probes and hooks reach the pod, not another host (check_hostProbesAndHostLifecycle.go)."""
    for kind in ("httpGet", "tcpSocket"):
        if (handler.get(kind) or {}).get("host"):
            out.refusals.append(f"{path}.{kind}.host: probing another host is not allowed")


def _volume(path: str, volume: Obj, allowed: Allowed, out: Checked) -> None:
    kinds = sorted(set(volume) - {"name"})
    for kind in kinds:
        if kind not in VOLUME_TYPES:
            why = " (CVE-2024-10220)" if kind == "gitRepo" else ""
            out.refusals.append(f"{path}: {kind} volumes are not allowed{why}")
    if "secret" in volume:
        _secret(path, volume["secret"].get("secretName", ""), allowed, out)
    if "configMap" in volume:
        _config_map(path, volume["configMap"].get("name", ""), allowed, out)
    if "persistentVolumeClaim" in volume:
        out.claims.append(volume["persistentVolumeClaim"].get("claimName", ""))
    if "csi" in volume:
        ref = volume["csi"].get("nodePublishSecretRef") or {}
        if ref:
            _secret(f"{path}.csi.nodePublishSecretRef", ref.get("name", ""), allowed, out)
    for i, source in enumerate((volume.get("projected") or {}).get("sources") or []):
        where = f"{path}.projected.sources[{i}]"
        if "secret" in source:
            _secret(where, source["secret"].get("name", ""), allowed, out)
        if "configMap" in source:
            _config_map(where, source["configMap"].get("name", ""), allowed, out)
        if "serviceAccountToken" in source and not allowed.service_account_token:
            out.refusals.append(f"{where}: projects a service-account token")
        if "clusterTrustBundle" in source:
            out.refusals.append(f"{where}: cluster trust bundles are the on-prem cluster's")


def _secret(path: str, name: str, allowed: Allowed, out: Checked) -> None:
    if name in allowed.secrets:
        if name not in out.secrets:
            out.secrets.append(name)
    else:
        out.refusals.append(f"{path}: Secret {name} is not on the policy's allow-list")


def _config_map(path: str, name: str, allowed: Allowed, out: Checked) -> None:
    if name in allowed.config_maps:
        if name not in out.config_maps:
            out.config_maps.append(name)
    else:
        out.refusals.append(f"{path}: ConfigMap {name} is not on the policy's allow-list")

"""The sandbox API server through the official kubernetes client only: the semantics burst's
watch, replicate, sync and leader-election code rely on, as strict as the real server."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from burst.sandbox import Sandbox, gpu_node
from tests.conftest import ROOT, wait_for


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


def test_create_get_and_the_server_set_fields(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    made = core.create_namespaced_config_map("default", cm("a", x="1"))
    assert made.metadata.uid and made.metadata.resource_version and made.metadata.creation_timestamp
    generated = core.create_namespaced_config_map("default", {"metadata": {"generateName": "run-"}})
    assert generated.metadata.name.startswith("run-") and len(generated.metadata.name) == 9
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map("default", cm("a"))
    assert exists.value.status == 409 and "AlreadyExists" in exists.value.body
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("nope", "default")
    assert missing.value.status == 404
    with pytest.raises(ApiException) as no_ns:
        core.create_namespaced_config_map("no-such-ns", cm("a"))
    assert no_ns.value.status == 404


def test_list_with_label_and_field_selectors_and_pages(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "team-a"}})
    for i in range(7):
        core.create_namespaced_config_map(
            "default", cm(f"cm-{i}", {"app": "x" if i % 2 else "y", "i": str(i)})
        )
    core.create_namespaced_config_map("team-a", cm("other", {"app": "x"}))
    names = lambda items: [o.metadata.name for o in items]  # noqa: E731
    assert names(core.list_namespaced_config_map("default", label_selector="app=x").items) == [
        "cm-1",
        "cm-3",
        "cm-5",
    ]
    assert names(
        core.list_namespaced_config_map("default", label_selector="app!=x,i in (0,2)").items
    ) == ["cm-0", "cm-2"]
    assert names(core.list_namespaced_config_map("default", label_selector="!app").items) == []
    assert names(core.list_config_map_for_all_namespaces(label_selector="app=x").items) == [
        "cm-1",
        "cm-3",
        "cm-5",
        "other",
    ]
    assert names(
        core.list_namespaced_config_map("default", field_selector="metadata.name=cm-4").items
    ) == ["cm-4"]
    first = core.list_namespaced_config_map("default", limit=3)
    assert names(first.items) == ["cm-0", "cm-1", "cm-2"] and first.metadata._continue
    assert first.metadata.remaining_item_count == 4
    rest = core.list_namespaced_config_map("default", limit=10, _continue=first.metadata._continue)
    assert names(rest.items) == ["cm-3", "cm-4", "cm-5", "cm-6"] and not rest.metadata._continue


def test_optimistic_concurrency(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_config_map("default", cm("c", v="0"))
    seen = core.read_namespaced_config_map("c", "default")
    seen.data = {"v": "1"}
    updated = core.replace_namespaced_config_map("c", "default", seen)
    assert int(updated.metadata.resource_version) > int(seen.metadata.resource_version)
    seen.data = {"v": "2"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_config_map("c", "default", seen)
    assert stale.value.status == 409 and "the object has been modified" in stale.value.body
    assert core.read_namespaced_config_map("c", "default").data == {"v": "1"}


def test_status_is_a_subresource(kube: Any) -> None:
    batch = client.BatchV1Api(kube)
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "suspend": True,
            "managedBy": "example.com/other",  # so the Job controller leaves its status alone
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "m", "image": "busybox"}],
                }
            },
        },
    }
    made = batch.create_namespaced_job("default", job)
    assert made.metadata.generation == 1
    batch.patch_namespaced_job("j", "default", {"status": {"active": 5}})
    assert not batch.read_namespaced_job(
        "j", "default"
    ).status.active  # ignored on the main resource
    batch.patch_namespaced_job_status("j", "default", {"status": {"active": 5}})
    after = batch.read_namespaced_job("j", "default")
    assert after.status.active == 5 and after.metadata.generation == 1  # status is not spec
    batch.patch_namespaced_job("j", "default", {"spec": {"parallelism": 3}})
    assert batch.read_namespaced_job("j", "default").metadata.generation == 2


def test_each_patch_type(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    pod = {
        "metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {
            "containers": [{"name": "main", "image": "img:1"}, {"name": "side", "image": "side:1"}]
        },
    }
    core.create_namespaced_pod("default", pod)
    # strategic merge (the client's default for a dict on a built-in kind): containers by name
    core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "main", "image": "img:2"}]}}
    )
    images = {c.name: c.image for c in core.read_namespaced_pod("p", "default").spec.containers}
    assert images == {"main": "img:2", "side": "side:1"}
    # JSON merge patch: lists are replaced whole, null deletes
    core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"labels": {"a": None, "b": "2"}}},
        _content_type="application/merge-patch+json",
    )
    assert core.read_namespaced_pod("p", "default").metadata.labels == {"b": "2"}
    # JSON patch: a list of operations
    core.patch_namespaced_pod(
        "p",
        "default",
        [
            {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
            {"op": "test", "path": "/metadata/labels/b", "value": "2"},
        ],
    )
    assert core.read_namespaced_pod("p", "default").metadata.annotations == {"k": "v"}
    with pytest.raises(ApiException) as failed_test:
        core.patch_namespaced_pod(
            "p", "default", [{"op": "test", "path": "/metadata/labels/b", "value": "9"}]
        )
    assert failed_test.value.status == 422


def test_strategic_merge_patch_is_refused_for_custom_resources(kube: Any) -> None:
    custom = client.CustomObjectsApi(kube)
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "t"},
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {}},
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", body)
    custom.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", "t", {"metadata": {"labels": {"x": "y"}}}
    )  # merge patch: fine
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            "default",
            "pytorchjobs",
            "t",
            {"metadata": {"labels": {"x": "z"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert refused.value.status == 415


def test_finalizers_hold_deletion_until_removed(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "f", "finalizers": ["burst.dev/keep"]}}
    )
    core.delete_namespaced_config_map("f", "default")
    held = core.read_namespaced_config_map("f", "default")
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map(
        "f",
        "default",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("f", "default")
    assert gone.value.status == 404


def _job_with_pods(kube: Any, name: str) -> list[str]:
    batch, core = client.BatchV1Api(kube), client.CoreV1Api(kube)
    core.create_node(gpu_node(f"{name}-node"))
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "template": {
                    "metadata": {"annotations": {"sandbox.burst.dev/duration": "1h"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "m", "image": "busybox"}],
                    },
                },
            },
        },
    )
    return wait_for(
        lambda: [
            p.metadata.name
            for p in core.list_namespaced_pod("default", label_selector=f"job-name={name}").items
            if len(core.list_namespaced_pod("default", label_selector=f"job-name={name}").items)
            == 2
        ]
    )


def test_background_deletion_collects_the_pods(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    _job_with_pods(kube, "bg")
    client.BatchV1Api(kube).delete_namespaced_job("bg", "default", propagation_policy="Background")
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector="job-name=bg").items)


def test_jobs_orphan_their_pods_by_default_as_batch_v1_does(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    pods = _job_with_pods(kube, "orph")
    client.BatchV1Api(kube).delete_namespaced_job("orph", "default")
    time.sleep(0.3)
    left = core.list_namespaced_pod("default", label_selector="job-name=orph").items
    assert sorted(p.metadata.name for p in left) == sorted(pods)
    assert all(not p.metadata.owner_references for p in left)


def test_foreground_deletion_waits_for_dependents(kube: Any) -> None:
    batch = client.BatchV1Api(kube)
    _job_with_pods(kube, "fg")
    batch.delete_namespaced_job("fg", "default", propagation_policy="Foreground")
    wait_for(lambda: _gone(lambda: batch.read_namespaced_job("fg", "default")))
    assert (
        not client.CoreV1Api(kube)
        .list_namespaced_pod("default", label_selector="job-name=fg")
        .items
    )


def _gone(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        return bool(exc.status == 404)
    return False


def test_watch_with_selectors_resume_and_bookmarks(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", cm("w1", {"app": "x"}))
    core.create_namespaced_config_map("default", cm("w2", {"app": "y"}))
    core.patch_namespaced_config_map("w1", "default", {"data": {"k": "v"}})
    core.patch_namespaced_config_map("w2", "default", {"metadata": {"labels": {"app": "x"}}})
    core.delete_namespaced_config_map("w1", "default")
    seen = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        "default",
        label_selector="app=x",
        resource_version=start,
        allow_watch_bookmarks=True,
        timeout_seconds=2,
    ):
        if event["type"] == "BOOKMARK":
            # A bookmark carries only a resourceVersion to resume from, past everything above.
            bookmark_rv = int(event["raw_object"]["metadata"]["resourceVersion"])
            seen.append(("BOOKMARK", None))
            break
        seen.append((event["type"], event["object"].metadata.name))
    # w2 enters the selector by its label change: the watcher sees it ADDED, as with the real server.
    assert seen == [
        ("ADDED", "w1"),
        ("MODIFIED", "w1"),
        ("ADDED", "w2"),
        ("DELETED", "w1"),
        ("BOOKMARK", None),
    ]
    assert bookmark_rv >= int(core.list_namespaced_config_map("default").metadata.resource_version)


def test_watch_from_now_sees_only_new_events(kube: Any) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_config_map("default", cm("old"))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    got: list[str] = []

    def follow() -> None:
        for event in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=2
        ):
            got.append(f"{event['type']} {event['object'].metadata.name}")
            if len(got) == 2:
                return

    t = threading.Thread(target=follow)
    t.start()
    core.create_namespaced_config_map("default", cm("new"))
    core.delete_namespaced_config_map("new", "default")
    t.join(5)
    assert got == ["ADDED new", "DELETED new"]


def test_a_compacted_resource_version_is_410_expired() -> None:
    with Sandbox(history=20, controllers=False) as sandbox:
        api = client.ApiClient(client.Configuration(host=sandbox.url))
        core = client.CoreV1Api(api)
        old = core.list_namespaced_config_map("default").metadata.resource_version
        for i in range(40):
            core.create_namespaced_config_map("default", cm(f"c{i}"))
        stream = watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2
        )
        with pytest.raises(ApiException) as expired:
            list(stream)
        assert expired.value.status == 410
        api.close()


def test_bearer_token_is_required_when_set() -> None:
    with Sandbox(token="s3cret", controllers=False) as sandbox:
        anonymous = client.ApiClient(client.Configuration(host=sandbox.url))
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(anonymous).list_namespace()
        assert refused.value.status == 401
        config = client.Configuration(
            host=sandbox.url,
            api_key={"authorization": "s3cret"},
            api_key_prefix={"authorization": "Bearer"},
        )
        authorised = client.ApiClient(config)
        assert client.CoreV1Api(authorised).list_namespace().items
        bad = client.Configuration(
            host=sandbox.url,
            api_key={"authorization": "wrong"},
            api_key_prefix={"authorization": "Bearer"},
        )
        with pytest.raises(ApiException):
            client.CoreV1Api(client.ApiClient(bad)).list_namespace()
        for c in (anonymous, authorised):
            c.close()


CANDIDATE = """
import sys, time
from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
url, name = sys.argv[1], sys.argv[2]
config = client.Configuration(host=url)
client.Configuration.set_default(config)
lock = LeaseLock("burst-leader", "default", name)
def lead():
    print("leading", name, flush=True)
    while True:
        time.sleep(1)
cfg = electionconfig.Config(lock, lease_duration=3, renew_deadline=2, retry_period=1.5,
                            onstarted_leading=lead, onstopped_leading=lambda: sys.exit(0))
print("standing", name, flush=True)
leaderelection.LeaderElection(cfg).run()
"""


def test_leader_election_with_the_clients_own_module(sandbox: Any) -> None:
    """The second candidate follows while the first renews, and leads once the first stopped
    renewing and its Lease ran out, not before. The Lease's own times say so: a busy machine
    makes the handover later, never wrong (a wall-clock bound of lease plus retry, 4.5 s, was
    missed at 4.98 s on a loaded machine)."""
    coordination = client.CoordinationV1Api(
        client.ApiClient(client.Configuration(host=sandbox.url))
    )

    def lease() -> Any:
        return coordination.read_namespaced_lease("burst-leader", "default").spec

    def start(name: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", CANDIDATE, sandbox.url, name],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert process.stdout is not None and process.stdout.readline() == f"standing {name}\n"
        return process

    first = start("replica-a")
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "leading replica-a"
        second = start("replica-b")
        try:
            renewed = lease().renew_time
            wait_for(lambda: lease().renew_time > renewed, timeout=60)  # renewed as b stands
            assert lease().holder_identity == "replica-a"
            first.kill()  # stops renewing, as a crashed replica does
            first.wait()
            last = lease()
            assert last.holder_identity == "replica-a"
            assert (
                second.stdout is not None
                and second.stdout.readline().strip() == "leading replica-b"
            )
            taken = lease()
            assert taken.holder_identity == "replica-b"
            # Not before the Lease ran out: a lease duration after the last renewal at least.
            assert taken.acquire_time - last.renew_time >= timedelta(seconds=3), (taken, last)
        finally:
            _end(second)
    finally:
        _end(first)


def _end(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.communicate()

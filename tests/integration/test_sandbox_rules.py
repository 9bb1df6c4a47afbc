"""The sandbox API server is as strict as kube-apiserver where burst depends on it. Each rule
names the upstream source it follows; burst's own fixes are shown in test_kube_defects.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from burst.clock import FakeClock
from burst.sandbox import Sandbox, gpu_node
from tests.conftest import ROOT, wait_for
from tests.integration.test_sandbox_cluster import pod_spec
from tests.integration.test_watch import gpu_job


def test_list_items_carry_no_type_meta_but_watch_events_and_gets_do(kube: Any) -> None:
    """kubernetes/kubernetes#3030, #63676, #98925, kubernetes-client/python#1617: the items of a
    list of a built-in kind have no kind or apiVersion; a single GET and watch events have them.
    Custom resources are served as stored, with their TypeMeta."""
    batch = client.BatchV1Api(kube)
    batch.create_namespaced_job("default", gpu_job("listed", suspend=True))
    listed = json.loads(batch.list_job_for_all_namespaces(_preload_content=False).data)
    assert listed["kind"] == "JobList" and listed["apiVersion"] == "batch/v1"
    assert [set(i) & {"kind", "apiVersion"} for i in listed["items"]] == [set()]
    got = json.loads(batch.read_namespaced_job("listed", "default", _preload_content=False).data)
    assert (got["kind"], got["apiVersion"]) == ("Job", "batch/v1")
    stream = watch.Watch().stream(
        batch.list_namespaced_job, "default", resource_version="0", timeout_seconds=1
    )
    event = next(stream)
    assert (event["raw_object"]["kind"], event["raw_object"]["apiVersion"]) == ("Job", "batch/v1")
    custom = client.CustomObjectsApi(kube)
    custom.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"}},
    )
    items = custom.list_cluster_custom_object("kubeflow.org", "v1", "pytorchjobs")["items"]
    assert items[0]["kind"] == "PyTorchJob"


def refused(call: Any) -> dict[str, Any]:
    """The Status body of a refused call."""
    with pytest.raises(ApiException) as caught:
        call()
    body: dict[str, Any] = json.loads(caught.value.body)
    return body


def job(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"template": pod_spec(), **spec}}


def test_job_create_validation(kube: Any) -> None:
    """pkg/apis/batch/validation/validation.go validateGeneratedSelector and validateJobTemplateSpec,
    after strategy.go PrepareForCreate generated the selector: a selector or controller-uid labels
    of the user's own without manualSelector, restartPolicy Always, no containers: 422 Invalid."""
    batch = client.BatchV1Api(kube)
    with_selector = job("sel", selector={"matchLabels": {"app": "x"}})
    body = refused(lambda: batch.create_namespaced_job("default", with_selector))
    assert body["code"] == 422 and body["reason"] == "Invalid"
    assert "spec.selector: Invalid value: `selector` not auto-generated" in body["message"]
    stale = job("stale")
    stale["spec"]["template"]["metadata"]["labels"] = {"controller-uid": "0000-old"}
    body = refused(lambda: batch.create_namespaced_job("default", stale))
    assert "spec.template.metadata.labels[controller-uid]" in body["message"]
    always = job("always")
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    body = refused(lambda: batch.create_namespaced_job("default", always))
    assert (
        'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
        in body["message"]
    )
    empty = job("empty")
    empty["spec"]["template"]["spec"]["containers"] = []
    body = refused(lambda: batch.create_namespaced_job("default", empty))
    assert "spec.template.spec.containers: Required value" in body["message"]
    # A pod failure policy needs restartPolicy Never (the Job's CEL rule, "only \"Never\" is
    # supported when podFailurePolicy is specified"), and podReplacementPolicy Failed if set.
    ignore = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    on_failure = job("onfailure", podFailurePolicy=ignore)
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    body = refused(lambda: batch.create_namespaced_job("default", on_failure))
    assert (
        'spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported '
        "when podFailurePolicy is specified" in body["message"]
    )
    replaced = job("replaced", podFailurePolicy=ignore, podReplacementPolicy="TerminatingOrFailed")
    body = refused(lambda: batch.create_namespaced_job("default", replaced))
    assert "spec.podReplacementPolicy" in body["message"]
    manual = job("manual", manualSelector=True, selector={"matchLabels": {"app": "x"}})
    manual["spec"]["template"]["metadata"]["labels"] = {"app": "x"}
    assert batch.create_namespaced_job("default", manual).spec.manual_selector


def test_job_defaults_fill_the_pod_failure_policy_and_the_replacement_policy(kube: Any) -> None:
    """pkg/apis/batch/v1/defaults.go SetDefaults_Job: an onPodConditions pattern without a status
    gets "True"; podReplacementPolicy (JobPodReplacementPolicy, on by default since 1.29) is
    Failed for a Job with a pod failure policy and TerminatingOrFailed for one without. A Job
    read back carries them whether its author wrote them or not."""
    batch = client.BatchV1Api(kube)
    ignore = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    batch.create_namespaced_job("default", job("ruled", podFailurePolicy=ignore, suspend=True))
    batch.create_namespaced_job("default", job("plain", suspend=True))
    ruled = json.loads(batch.read_namespaced_job("ruled", "default", _preload_content=False).data)
    assert ruled["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}
    ]
    assert ruled["spec"]["podReplacementPolicy"] == "Failed"
    plain = batch.read_namespaced_job("plain", "default")
    assert plain.spec.pod_replacement_policy == "TerminatingOrFailed"


def test_job_status_rules_of_1_32(kube: Any) -> None:
    """ValidateJobStatusUpdate with JobManagedBy on (beta, default from 1.32, for every Job):
    Failed needs FailureTarget, Complete needs SuccessCriteriaMet and a completionTime, a
    completionTime needs Complete, a finished Job needs a startTime."""
    batch = client.BatchV1Api(kube)
    batch.create_namespaced_job("default", job("held", suspend=True))
    stamp = "2026-11-30T12:00:00Z"

    def write(status: dict[str, Any]) -> Any:  # a merge patch replaces the condition list
        return lambda: batch.patch_namespaced_job_status(
            "held", "default", {"status": status}, _content_type="application/merge-patch+json"
        )

    def cond(type_: str) -> dict[str, Any]:
        return {"type": type_, "status": "True", "lastTransitionTime": stamp}

    failed = refused(write({"conditions": [cond("Failed")], "startTime": stamp}))
    assert (
        "cannot set Failed=True condition without the FailureTarget=true condition"
        in failed["message"]
    )
    timed = refused(
        write(
            {
                "conditions": [cond("FailureTarget"), cond("Failed")],
                "startTime": stamp,
                "completionTime": stamp,
            }
        )
    )
    assert "cannot set completionTime when there is no Complete=True condition" in timed["message"]
    complete = refused(
        write({"conditions": [cond("Complete")], "startTime": stamp, "completionTime": stamp})
    )
    assert "without the SuccessCriteriaMet=true condition" in complete["message"]
    unstarted = refused(
        write(
            {"conditions": [cond("SuccessCriteriaMet"), cond("Complete")], "completionTime": stamp}
        )
    )
    assert "startTime is required for finished job" in unstarted["message"]
    accepted = {
        "conditions": [cond("SuccessCriteriaMet"), cond("Complete")],
        "startTime": stamp,
        "completionTime": stamp,
        "succeeded": 1,
    }
    assert batch.patch_namespaced_job_status("held", "default", {"status": accepted})
    undone = refused(write({"conditions": [cond("SuccessCriteriaMet")], "completionTime": stamp}))
    assert "cannot disable the terminal Complete=True condition" in undone["message"]


def test_suspend_deletes_the_pods_and_resuming_starts_the_clock_again(kube: Any) -> None:
    """Kubernetes docs, "Suspending a Job"; pkg/controller/job/job_controller.go: suspending
    deletes active pods (Suspended=True, JobSuspended), resuming resets status.startTime."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
    batch.create_namespaced_job("default", job("long", template=pod_spec(seconds="1h")))
    first = wait_for(lambda: batch.read_namespaced_job("long", "default").status.start_time)
    wait_for(lambda: core.list_namespaced_pod("default", label_selector="job-name=long").items)
    time.sleep(1.1)  # timestamps have whole seconds: let the next start be a later one
    batch.patch_namespaced_job("long", "default", {"spec": {"suspend": True}})
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector="job-name=long").items)
    held = batch.read_namespaced_job("long", "default").status
    assert [(c.type, c.reason) for c in held.conditions if c.status == "True"] == [
        ("Suspended", "JobSuspended")
    ]
    batch.patch_namespaced_job("long", "default", {"spec": {"suspend": False}})
    again = wait_for(
        lambda: (s := batch.read_namespaced_job("long", "default").status.start_time) != first and s
    )
    assert again > first


def test_the_ttl_controller_deletes_a_finished_job(kube: Any) -> None:
    """pkg/controller/ttlafterfinished: a finished Job with ttlSecondsAfterFinished is deleted
    (foreground, its pods first) that long after its Complete condition's transition."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
    batch.create_namespaced_job("default", job("brief", ttlSecondsAfterFinished=0))
    wait_for(lambda: not batch.list_namespaced_job("default").items, timeout=15)
    assert not core.list_namespaced_pod("default", label_selector="job-name=brief").items


def pytorchjob(name: str, run_policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": pod_spec()}},
            "notInTheSchema": True,
        },
    }


def test_the_training_operator_deletes_a_finished_pytorchjob_after_its_ttl(kube: Any) -> None:
    """kubeflow/training-operator cleanupJob: a finished PyTorchJob with
    runPolicy.ttlSecondsAfterFinished is deleted that long after its completionTime (background
    propagation: its pods go after it)."""
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
    made = pytorchjob("brief", {"ttlSecondsAfterFinished": 0})
    del made["spec"]["notInTheSchema"]
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", made)
    kept = pytorchjob("kept", {})
    del kept["spec"]["notInTheSchema"]
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", kept)

    def names() -> set[str]:
        items = custom.list_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs")
        return {o["metadata"]["name"] for o in items["items"]}

    wait_for(lambda: names() == {"kept"}, timeout=15)
    brief = "training.kubeflow.org/job-name=brief"
    wait_for(lambda: not core.list_namespaced_pod("default", label_selector=brief).items)
    # Without a TTL a finished PyTorchJob stays.
    wait_for(
        lambda: custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "kept"
        )["status"].get("completionTime")
    )
    assert names() == {"kept"}


@pytest.mark.parametrize(
    ("policy", "code", "backoff", "restarted"),
    [
        ("Never", "1", None, False),
        ("OnFailure", "1", None, "in place"),
        ("ExitCode", "1", None, False),  # 1-127: a permanent error
        ("ExitCode", "137", None, True),  # 128-255: retryable (killed, as on a reclaimed node)
        ("OnFailure", "1", 0, False),
    ],
)
def test_the_training_operator_makes_a_failed_replica_pod_again_as_its_restart_policy_says(
    kube: Any, policy: str, code: str, backoff: int | None, restarted: bool | str
) -> None:
    """kubeflow/training-operator v1.9.0: a replica's pod gets its restartPolicy, ExitCode as
    Never (common/pod.go setRestartPolicy), so under OnFailure the kubelet restarts a failing
    container in place. A Failed replica pod is deleted and made again at its index, the job
    Restarting, under OnFailure or Always, or ExitCode with a code of 128 or more (ReconcilePods,
    pkg/util/train IsRetryableExitCode); under Never, or ExitCode with a lower code, the
    PyTorchJob fails (pytorchjob_controller.go UpdateJobStatus); with runPolicy.backoffLimit 0
    any failed pod or restart fails it (common/job.go, PastBackoffLimit)."""
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
    made = pytorchjob("flaky", {} if backoff is None else {"backoffLimit": backoff})
    del made["spec"]["notInTheSchema"]
    master = made["spec"]["pytorchReplicaSpecs"]["Master"]
    master["restartPolicy"] = policy
    master["template"]["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = code
    master["template"]["spec"]["containers"][0]["name"] = "pytorch"  # whose code the operator reads
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", made)
    selector = "training.kubeflow.org/job-name=flaky"
    seen: set[str] = set()

    def conditions() -> dict[str, str]:
        for p in core.list_namespaced_pod("default", label_selector=selector).items:
            seen.add(p.metadata.uid)
        job = custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "flaky"
        )
        return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions", [])}

    if restarted == "in place":

        def restarts() -> list[int]:
            pods = core.list_namespaced_pod("default", label_selector=selector).items
            return [p.status.container_statuses[0].restart_count for p in pods]

        wait_for(lambda: conditions() and restarts() and restarts()[0] >= 1, timeout=15)
        assert len(seen) == 1 and len(restarts()) == 1  # the same pod, its container restarted
        assert "Restarting" not in conditions() and conditions().get("Failed") != "True"
    elif restarted:
        wait_for(lambda: len(seen) >= 3 if conditions() else False, timeout=15)
        assert conditions().get("Failed") != "True"
        assert [p.metadata.name for p in core.list_namespaced_pod("default").items] in (
            [],
            ["flaky-master-0"],
        )
    else:
        wait_for(lambda: conditions().get("Failed") == "True", timeout=15)
        assert len(seen) == 1 and "Restarting" not in conditions()


@pytest.mark.parametrize(("policy", "fails"), [("Never", True), ("OnFailure", False)])
def test_a_lost_node_fails_a_pytorchjob_whose_replica_never_restarts(
    kube: Any, policy: str, fails: bool
) -> None:
    """Pod GC fails a deleted node's pods (no exit code); the training operator then fails a
    PyTorchJob whose replica's restartPolicy is Never and makes the pod again under OnFailure
    (v1.9.0 common/pod.go ReconcilePods): a spot reclaim would fail the first
    (kube/translate.py fails_on_reclaim keeps it off spot)."""
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
    made = pytorchjob("long", {})
    del made["spec"]["notInTheSchema"]
    master = made["spec"]["pytorchReplicaSpecs"]["Master"]
    master["restartPolicy"] = policy
    master["template"]["metadata"]["annotations"]["sandbox.burst.dev/duration"] = "1h"
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", made)

    def conditions() -> dict[str, str]:
        job = custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", "long"
        )
        return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions", [])}

    wait_for(lambda: conditions().get("Running") == "True")
    core.delete_node("n0")
    if fails:
        wait_for(lambda: conditions().get("Failed") == "True")
    else:
        wait_for(lambda: conditions().get("Restarting") == "True")
        core.create_node(gpu_node("n1", "Tesla-V100-SXM2-16GB"))
        wait_for(lambda: conditions().get("Running") == "True")
        assert "Failed" not in conditions() and "Restarting" not in conditions()


@pytest.mark.parametrize(
    ("operator", "kept"),
    [("v1.6", set()), ("v1.8", {"suspend"}), ("v1.9", {"suspend", "managedBy"})],
)
def test_the_pytorchjob_crd_prunes_what_its_operator_does_not_know(
    operator: str, kept: set[str]
) -> None:
    """A structural CRD schema prunes undeclared fields silently (kubeflow/training-operator
    manifests/base/crds/kubeflow.org_pytorchjobs.yaml has no x-kubernetes-preserve-unknown-fields):
    runPolicy.suspend exists from v1.7 (PR #1859), runPolicy.managedBy from v1.9 (PR #2203)."""
    with Sandbox(training_operator=operator, controllers=False) as cluster:
        api = client.ApiClient(client.Configuration(host=cluster.url))
        custom = client.CustomObjectsApi(api)
        policy = {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue", "backoffLimit": 1}
        made = custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", pytorchjob("p", policy)
        )
        assert set(made["spec"]["runPolicy"]) == kept | {"backoffLimit"}
        assert "notInTheSchema" not in made["spec"]
        patched = custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            "default",
            "pytorchjobs",
            "p",
            {"spec": {"runPolicy": {"suspend": False}}},
        )
        assert ("suspend" in patched["spec"]["runPolicy"]) == ("suspend" in kept)
        api.close()


def test_pod_admission_refuses_what_a_pod_names_but_does_not_exist(kube: Any) -> None:
    """403 Forbidden from the ServiceAccount, Priority and RuntimeClass admission plugins
    (plugin/pkg/admission/{serviceaccount,priority,runtimeclass}); system-* priority classes need
    no object; every namespace gets its `default` ServiceAccount."""
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "team"}})
    assert core.read_namespaced_service_account("default", "team")

    def pod(name: str, **spec: Any) -> dict[str, Any]:
        body = pod_spec(**spec)
        body["metadata"]["name"] = name
        return body

    cases = {
        "sa": (
            {"serviceAccountName": "builder"},
            'error looking up service account team/builder: serviceaccount "builder" not found',
        ),
        "pc": ({"priorityClassName": "urgent"}, "no PriorityClass with name urgent was found"),
        "rc": ({"runtimeClassName": "kata"}, 'pod rejected: RuntimeClass "kata" not found'),
    }
    for name, (spec, message) in cases.items():
        made = pod(name, **spec)
        body = refused(lambda made=made: core.create_namespaced_pod("team", made))
        assert body["code"] == 403 and body["reason"] == "Forbidden"
        assert body["message"] == f'pods "{name}" is forbidden: {message}'
    assert core.create_namespaced_pod("team", pod("sys", priorityClassName="system-node-critical"))


def test_a_pod_for_another_scheduler_is_never_scheduled(kube: Any) -> None:
    """kube-scheduler queues only pods whose schedulerName it serves (pkg/scheduler/eventhandlers.go
    responsibleForPod): such a pod stays Pending, with no PodScheduled condition."""
    core = client.CoreV1Api(kube)
    core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
    body = pod_spec(schedulerName="volcano")
    body["metadata"]["name"] = "elsewhere"
    core.create_namespaced_pod("default", body)
    time.sleep(0.3)
    status = core.read_namespaced_pod("elsewhere", "default").status
    assert status.phase == "Pending" and not status.conditions


def test_a_terminating_namespace_refuses_new_content_and_stays_until_it_is_empty(
    kube: Any,
) -> None:
    """NamespaceLifecycle admission: `unable to create new content in namespace X because it is
    being terminated` (403); the namespace controller deletes its content, and a finalizer nobody
    removes keeps it Terminating."""
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "going"}})
    core.create_namespaced_config_map(
        "going", {"metadata": {"name": "held", "finalizers": ["example.org/keep"]}}
    )
    core.create_namespaced_config_map("going", {"metadata": {"name": "free"}})
    core.delete_namespace("going")
    assert core.read_namespace("going").status.phase == "Terminating"
    body = refused(
        lambda: core.create_namespaced_config_map("going", {"metadata": {"name": "late"}})
    )
    assert body["code"] == 403
    assert body["message"] == (
        'configmaps "late" is forbidden: unable to create new content in namespace going '
        "because it is being terminated"
    )
    wait_for(
        lambda: (
            [c.metadata.name for c in core.list_namespaced_config_map("going").items] == ["held"]
        )
    )
    time.sleep(0.2)
    assert core.read_namespace("going").status.phase == "Terminating"
    core.patch_namespaced_config_map(
        "held",
        "going",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    wait_for(lambda: "going" not in [n.metadata.name for n in core.list_namespace().items])


def test_objects_carry_managed_fields_from_every_writer(kube: Any) -> None:
    """Every create, update and patch runs the field manager (apiserver pkg/endpoints/handlers);
    objects come back with metadata.managedFields, named after the client's User-Agent."""
    batch = client.BatchV1Api(kube)
    batch.create_namespaced_job("default", job("managed", suspend=True))

    def managers() -> set[tuple[str, str]]:
        raw = json.loads(
            batch.read_namespaced_job("managed", "default", _preload_content=False).data
        )
        return {(e["manager"], e.get("subresource", "")) for e in raw["metadata"]["managedFields"]}

    # The python client's User-Agent, then the Job controller's status write.
    wait_for(
        lambda: {("OpenAPI-Generator", ""), ("kube-controller-manager", "status")} <= managers()
    )
    listed = json.loads(batch.list_namespaced_job("default", _preload_content=False).data)
    assert listed["items"][0]["metadata"]["managedFields"]


def test_a_continue_token_expires_with_the_history_it_points_into() -> None:
    """A paged list whose snapshot was compacted away is 410 Expired (apiserver
    pkg/storage/etcd3/errors.go): the client must start a new list."""
    with Sandbox(controllers=False) as cluster:
        api = client.ApiClient(client.Configuration(host=cluster.url))
        core = client.CoreV1Api(api)
        for i in range(5):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        first = core.list_namespaced_config_map("default", limit=2)
        core.create_namespaced_config_map("default", {"metadata": {"name": "later"}})
        cluster.store.compact()  # the history up to "later" is gone, the first page's with it
        body = refused(
            lambda: core.list_namespaced_config_map(
                "default", limit=2, _continue=first.metadata._continue
            )
        )
        assert body["code"] == 410 and body["reason"] == "Expired"
        assert body["message"].startswith("The provided continue parameter is too old")
        api.close()


def test_the_minimal_kueue_suspends_admits_by_quota_and_stops_what_runs_unadmitted() -> None:
    """kueue jobframework: a queued Job is created suspended (webhook), admitted in order while
    its ClusterQueue's GPU quota has room (unsuspended), re-suspended if resumed unadmitted; its
    queue label is fixed while it runs."""
    with Sandbox(tick=0.02, default_duration=30, kueue_quotas={"cms": 4}) as cluster:
        api = client.ApiClient(client.Configuration(host=cluster.url))
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB", 8))

        def queued(name: str) -> dict[str, Any]:
            body = job(name, template=pod_spec(gpus=4, seconds="1h"))
            body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "cms"}
            return body

        batch.create_namespaced_job("default", queued("first"))
        batch.create_namespaced_job("default", queued("second"))
        wait_for(lambda: batch.read_namespaced_job("first", "default").spec.suspend is False)
        time.sleep(0.2)
        assert batch.read_namespaced_job("second", "default").spec.suspend is True  # no room
        batch.patch_namespaced_job("second", "default", {"spec": {"suspend": False}})
        wait_for(lambda: batch.read_namespaced_job("second", "default").spec.suspend is True)
        body = refused(
            lambda: batch.patch_namespaced_job(
                "first", "default", {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": None}}}
            )
        )
        assert body["code"] == 403 and "field is immutable" in body["message"]
        batch.patch_namespaced_job(  # while suspended, the label may go: Kueue lets it be
            "second", "default", {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": None}}}
        )
        batch.patch_namespaced_job("second", "default", {"spec": {"suspend": False}})
        time.sleep(0.3)
        assert batch.read_namespaced_job("second", "default").spec.suspend is False
        api.close()


def test_secret_string_data_is_folded_into_data() -> None:
    """core/v1 Secret: stringData is merged into data on write and never read back."""
    with Sandbox(controllers=False) as cluster:
        api = client.ApiClient(client.Configuration(host=cluster.url))
        core = client.CoreV1Api(api)
        core.create_namespaced_secret(
            "default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
        )
        read = core.read_namespaced_secret("s", "default")
        assert read.data == {"k": "dg=="} and not read.string_data
        api.close()


def test_sandbox_nodes_carry_gpu_feature_discovery_labels_and_the_example_job_runs(
    kube: Any,
) -> None:
    """GPU feature discovery labels a V100 SXM2 node nvidia.com/gpu.product=Tesla-V100-SXM2-16GB
    (NVIDIA/gpu-feature-discovery internal/lm/resource.go: the NVML name, spaces to dashes); the
    sandbox labelled its nodes Tesla-V100, so the shipped example job never scheduled on them."""
    import yaml

    core = client.CoreV1Api(kube)
    core.create_node(gpu_node("default-v100"))
    example = yaml.safe_load((ROOT / "docs" / "examples" / "higgs-train.yaml").read_text())
    core.create_namespace({"metadata": {"name": example["metadata"]["namespace"]}})
    core.create_namespaced_secret(
        "cms-ml", {"metadata": {"name": "wandb-api-key"}, "stringData": {"key": "k"}}
    )
    limits = example["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/gpu"] = str(limits["nvidia.com/gpu"])  # kubectl sends quantities as text
    client.BatchV1Api(kube).create_namespaced_job("cms-ml", example)
    wait_for(
        lambda: [
            p
            for p in core.list_namespaced_pod("cms-ml").items
            if p.spec.node_name == "default-v100"
        ]
    )


@contextmanager
def timed_cluster() -> Iterator[
    tuple[FakeClock, client.CoreV1Api, client.BatchV1Api, Callable[[], None]]
]:
    """A cluster of one GPU node whose pods run on a FakeClock (a run lasts as long as the test
    moves the clock), its clients, and a wait for its control plane to have caught up."""
    clock = FakeClock()
    with Sandbox(clock=clock, tick=0.01) as sandbox:
        api = client.ApiClient(client.Configuration(host=sandbox.url))
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        core.create_node(gpu_node("n0", "Tesla-V100-SXM2-16GB"))
        assert sandbox.control is not None
        yield clock, core, batch, sandbox.control.settle
        api.close()


def test_the_job_controller_waits_out_the_pod_failure_backoff() -> None:
    """pkg/controller/job/backoff_utils.go (getRemainingTimeForFailuresCount, newBackoffRecord):
    with n pods failed since the Job's last success, the next pod is made no sooner than
    10 s x 2^(n-1), at most 10 minutes (DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff),
    after the last of them finished (its containers' finishedAt, getFinishedTime)."""
    with timed_cluster() as (clock, core, batch, settle):
        failing = pod_spec(seconds="1s")
        failing["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = "1"
        batch.create_namespaced_job("default", job("crash", backoffLimit=7, template=failing))

        def pods() -> list[Any]:
            return core.list_namespaced_pod("default", label_selector="job-name=crash").items

        def fail_the_last(made: int) -> None:
            wait_for(
                lambda: len(ps := pods()) == made and any(p.status.phase == "Running" for p in ps)
            )
            clock.advance(1)  # its run
            wait_for(lambda: sum(p.status.phase == "Failed" for p in pods()) == made)

        fail_the_last(1)
        for made, backoff in enumerate([10, 20, 40, 80, 160, 320, 600], start=1):
            clock.advance(timedelta(seconds=backoff - 1))
            settle()  # the control plane has looked: it makes no pod yet
            assert len(pods()) == made, f"pod {made + 1} made before its {backoff} s backoff"
            clock.advance(1)
            fail_the_last(made + 1)
        failed = wait_for(
            lambda: next(
                (
                    c
                    for c in batch.read_namespaced_job("crash", "default").status.conditions or []
                    if c.type == "Failed"
                ),
                None,
            )
        )
        assert failed.reason == "BackoffLimitExceeded" and len(pods()) == 8


def test_the_pod_failure_backoff_counts_from_the_last_success_and_a_lost_pods_mark() -> None:
    """backoff_utils.go newBackoffRecord: only failures after the last success count; getFinishedTime:
    a pod's containers' finishedAt, else (one failed by pod GC, its node gone) when it was
    deleted, which the sandbox's DisruptionTarget mark stands for."""
    from datetime import UTC, datetime

    from burst.sandbox.workloads import failure_backoff

    def ended(phase: str, at: str) -> dict[str, Any]:
        terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": at}
        return {
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {
                "phase": phase,
                "containerStatuses": [{"state": {"terminated": terminated}}],
            },
        }

    lost = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}],
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByPodGC",
                    "lastTransitionTime": "2026-01-01T00:01:00Z",
                },
            ],
        },
    }
    at = datetime(2026, 1, 1, 0, 1, 5, tzinfo=UTC)
    failed = [ended("Failed", "2026-01-01T00:00:10Z"), ended("Failed", "2026-01-01T00:00:30Z")]
    assert failure_backoff(failed, at, 10, 600) == 0  # 20 s from 00:00:30: over
    assert failure_backoff([*failed, lost], at, 10, 600) == 35  # 40 s from its mark at 00:01:00
    after = [*failed, ended("Succeeded", "2026-01-01T00:00:40Z"), lost]
    assert failure_backoff(after, at, 10, 600) == 5  # the first failure since the success: 10 s
    assert failure_backoff([ended("Succeeded", "2026-01-01T00:00:40Z")], at, 10, 600) == 0


def test_a_container_that_fails_under_on_failure_restarts_in_place_until_the_backoff_limit() -> (
    None
):
    """The kubelet restarts a container that exits in error when the pod's restartPolicy is
    OnFailure, in place: at once the first time, then once 10 s, 20 s, ... (to 5 minutes) have
    passed since it crashed (pkg/kubelet/kuberuntime doBackOff with client-go's
    flowcontrol.Backoff; kubelet.go backOffPeriod, MaxContainerBackOff), the pod Running and not
    Ready meanwhile (CrashLoopBackOff). The Job counts no failed pod, only its ready ones, and
    fails once its pods' restarts reach backoffLimit (job_controller.go
    pastBackoffLimitOnFailure)."""
    with timed_cluster() as (clock, core, batch, settle):
        crashing = pod_spec(seconds="1s")
        crashing["spec"]["restartPolicy"] = "OnFailure"
        crashing["metadata"]["annotations"]["sandbox.burst.dev/exit-code"] = "1"
        batch.create_namespaced_job("default", job("loop", backoffLimit=3, template=crashing))

        def container() -> Any:
            pods = core.list_namespaced_pod("default", label_selector="job-name=loop").items
            assert len(pods) == 1, "a restart in place makes no new pod"
            assert pods[0].status.phase == "Running"
            return pods[0].status.container_statuses[0]

        def status() -> Any:
            return batch.read_namespaced_job("loop", "default").status

        wait_for(lambda: status().ready == 1)
        clock.advance(1)  # its first run ends in error: restarted at once
        wait_for(lambda: container().restart_count == 1 and container().state.running)
        for restarts, backoff in [(1, 10), (2, 20)]:
            clock.advance(1)  # and again: now it waits
            wait_for(lambda: container().state.waiting is not None)
            assert container().state.waiting.reason == "CrashLoopBackOff"
            assert container().restart_count == restarts
            wait_for(lambda: status().ready == 0)
            assert status().active == 1 and not status().failed
            clock.advance(timedelta(seconds=backoff - 1))
            settle()
            assert container().state.waiting is not None
            clock.advance(1)
            if restarts < 2:
                wait_for(lambda: status().ready == 1)
        # The third restart reaches backoffLimit 3: the Job fails.
        failed = wait_for(
            lambda: next((c for c in status().conditions or [] if c.type == "Failed"), None)
        )
        assert failed.reason == "BackoffLimitExceeded"

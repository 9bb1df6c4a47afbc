"""Validation in the sandbox API server: what kube-apiserver refuses with 422 Invalid, for the kinds
burst writes. Each rule follows kubernetes/kubernetes as of 1.32, where the JobManagedBy feature
is on by default and its strict status rules apply to every Job:

- Job create: pkg/apis/batch/validation/validation.go (ValidateJob, validateGeneratedSelector,
  validateJobTemplateSpec) after pkg/registry/batch/job/strategy.go PrepareForCreate has generated
  the selector and the controller-uid / job-name template labels (never overwriting the user's).
- Job status: ValidateJobStatusUpdate with the options of strategy.go getStatusValidationOptions
  (most rules fire only when the fields they guard change, as there).
"""

from __future__ import annotations

from typing import Any

from burst.sandbox.errors import ApiError

Obj = dict[str, Any]
UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
TERMINAL_CONDITIONS = ("Complete", "Failed", "FailureTarget")


def invalid(kind: str, group: str, name: str, problems: list[tuple[str, str]]) -> ApiError:
    """422 Invalid as apimachinery's errors.NewInvalid renders it: `Job.batch "x" is invalid: ...`
    with one cause per field."""
    texts = [f"{path}: {message}" for path, message in problems]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {joined}',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": m, "field": p} for p, m in problems
            ],
        },
    )


def job_create_problems(job: Obj) -> list[tuple[str, str]]:
    """What ValidateJob refuses in a new Job, after the selector and labels were generated."""
    spec = job.get("spec") or {}
    meta = job.get("metadata") or {}
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    pod = template.get("spec") or {}
    problems: list[tuple[str, str]] = []
    if not spec.get("manualSelector"):
        expected = {
            **dict.fromkeys(UID_LABELS, meta["uid"]),
            **dict.fromkeys(NAME_LABELS, meta["name"]),
        }
        for key, value in expected.items():
            if labels.get(key) != value:
                problems.append(
                    (
                        f"spec.template.metadata.labels[{key}]",
                        f"Invalid value: {labels.get(key)!r}: must be '{value}'",
                    )
                )
        selector = spec.get("selector") or {}
        wanted = {"matchLabels": {UID_LABELS[0]: meta["uid"]}}
        if selector != wanted:
            problems.append(("spec.selector", "Invalid value: `selector` not auto-generated"))
    restart = pod.get("restartPolicy")
    if restart in (None, "", "Always"):
        problems.append(
            (
                "spec.template.spec.restartPolicy",
                'Required value: valid values: "OnFailure", "Never"',
            )
        )
    elif restart not in ("OnFailure", "Never"):
        problems.append(
            (
                "spec.template.spec.restartPolicy",
                f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
            )
        )
    if spec.get("podFailurePolicy") is not None:
        # validateJobSpec: a pod failure policy judges each pod's one run.
        if restart == "OnFailure":
            problems.append(
                (
                    "spec.template.spec.restartPolicy",
                    'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy '
                    "is specified",
                )
            )
        replacement = spec.get("podReplacementPolicy")
        if replacement not in (None, "Failed"):
            problems.append(
                (
                    "spec.podReplacementPolicy",
                    f'Unsupported value: "{replacement}": supported values: "Failed"',
                )
            )
    if not pod.get("containers"):
        problems.append(("spec.template.spec.containers", "Required value"))
    for field in (
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ):
        value = spec.get(field)
        if isinstance(value, int) and value < 0:
            problems.append(
                (f"spec.{field}", f"Invalid value: {value}: must be greater than or equal to 0")
            )
    return problems


def _true(status: Obj, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True" for c in status.get("conditions") or []
    )


def job_status_problems(old: Obj, new: Obj) -> list[tuple[str, str]]:
    """What ValidateJobStatusUpdate refuses in a status write (1.32, JobManagedBy on)."""
    before, after = old.get("status") or {}, new.get("status") or {}
    suspended = bool((new.get("spec") or {}).get("suspend"))
    problems: list[tuple[str, str]] = []

    def changed(*keys: str) -> bool:
        return any(before.get(k) != after.get(k) for k in keys)

    def cond_changed(type_: str) -> bool:
        return _true(before, type_) != _true(after, type_)

    complete, failed = _true(after, "Complete"), _true(after, "Failed")
    finished = complete or failed
    for key in ("active", "succeeded", "failed", "ready", "terminating"):
        value = after.get(key)
        if isinstance(value, int) and value < 0:
            problems.append(
                (f"status.{key}", f"Invalid value: {value}: must be greater than or equal to 0")
            )
    if complete and failed:
        problems.append(
            (
                "status.conditions",
                "Invalid value: cannot set Complete=True and Failed=true conditions",
            )
        )
    if (
        complete
        and _true(after, "FailureTarget")
        and (cond_changed("Complete") or cond_changed("FailureTarget"))
    ):
        problems.append(
            (
                "status.conditions",
                "Invalid value: cannot set Complete=True and FailureTarget=true conditions",
            )
        )
    if failed and not _true(after, "FailureTarget") and cond_changed("Failed"):
        problems.append(
            (
                "status.conditions",
                "Invalid value: cannot set Failed=True condition without the FailureTarget=true condition",
            )
        )
    if complete and not _true(after, "SuccessCriteriaMet") and cond_changed("Complete"):
        problems.append(
            (
                "status.conditions",
                "Invalid value: cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
            )
        )
    if (
        after.get("completionTime")
        and not complete
        and (cond_changed("Complete") or changed("completionTime"))
    ):
        problems.append(
            (
                "status.completionTime",
                "Invalid value: cannot set completionTime when there is no Complete=True condition",
            )
        )
    if (
        complete
        and not after.get("completionTime")
        and (cond_changed("Complete") or changed("completionTime"))
    ):
        problems.append(
            (
                "status.completionTime",
                "Required value: completionTime is required for Complete jobs",
            )
        )
    if before.get("completionTime") and changed("completionTime"):
        problems.append(
            ("status.completionTime", "Invalid value: completionTime cannot be mutated")
        )
    start, end = after.get("startTime"), after.get("completionTime")
    if start and end and end < start and changed("startTime", "completionTime"):
        problems.append(
            (
                "status.completionTime",
                "Invalid value: completionTime cannot be set before startTime",
            )
        )
    finished_changed = (_true(before, "Complete") or _true(before, "Failed")) != finished
    if finished and (after.get("active") or 0) > 0 and (finished_changed or changed("active")):
        problems.append(("status.active", "Invalid value: active>0 is invalid for finished job"))
    if (
        finished
        and (after.get("terminating") or 0) > 0
        and (finished_changed or changed("terminating"))
    ):
        problems.append(
            ("status.terminating", "Invalid value: terminating>0 is invalid for finished job")
        )
    if finished and not start and (finished_changed or changed("startTime")):
        problems.append(
            ("status.startTime", "Required value: startTime is required for finished job")
        )
    if before.get("startTime") and not start and not suspended:
        problems.append(
            ("status.startTime", "Required value: startTime cannot be removed for unsuspended job")
        )
    for type_ in TERMINAL_CONDITIONS:
        if _true(before, type_) and not _true(after, type_):
            problems.append(
                (
                    "status.conditions",
                    f"Invalid value: cannot disable the terminal {type_}=True condition",
                )
            )
    for counter in ("failed", "succeeded"):
        if (after.get(counter) or 0) < (before.get(counter) or 0):
            problems.append(
                (f"status.{counter}", f"Invalid value: cannot decrease the {counter} counter")
            )
    return problems

"""Which refusals of a create end the job, and what the job is told (policies/create_errors)."""

from __future__ import annotations

import json

import pytest

from dtjob_operator.policies.create_errors import CreateError, create_error_of, is_permanent

QUOTA = 'pods "j-worker-0" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1'
PSA = (
    'pods "j-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
    "allowPrivilegeEscalation != false"
)
NO_PC = 'pods "j-worker-0" is forbidden: no PriorityClass with name gold was found'
INVALID = (
    'Pod "j-worker-0" is invalid: spec.containers[0].resources.requests: '
    'Invalid value: "2": must be less than or equal to cpu limit of 1'
)


@pytest.mark.parametrize(
    ("code", "message", "permanent"),
    [
        (422, INVALID, True),
        (400, "the body of the request was in an unknown format", True),
        (403, PSA, True),
        (403, NO_PC, True),
        (403, QUOTA, False),
        (403, 'pods "x" is forbidden: status unknown for quota: gpus', False),
        (403, 'pods is forbidden: User "system:serviceaccount:x:op" cannot create', False),
        (429, "too many requests", False),
        (
            500,
            'Internal error occurred: failed calling webhook "x": context deadline exceeded',
            False,
        ),
        (503, "service unavailable", False),
        (504, "timeout", False),
        (404, 'namespaces "gone" not found', False),
        (0, "", False),
    ],
)
def test_permanent_or_transient(code: int, message: str, permanent: bool) -> None:
    assert is_permanent(code, message) is permanent


def test_status_body_gives_message_and_reason() -> None:
    body = json.dumps({"kind": "Status", "reason": "Invalid", "message": INVALID, "code": 422})
    error = create_error_of("Pod", "j-worker-0", 422, "Unprocessable Entity", body.encode())
    assert error == CreateError("Pod", "j-worker-0", 422, "Invalid", INVALID)
    text = error.describe()
    assert "Pod j-worker-0 (422 Invalid)" in text
    assert "spec.containers[0].resources.requests" in text  # the API server names the field
    assert "fix the job's spec" in text


def test_non_json_body_is_kept_as_the_message() -> None:
    error = create_error_of("Pod", "p", 503, "Service Unavailable", "upstream connect error")
    assert error.message == "upstream connect error" and error.reason == "Service Unavailable"
    assert error.describe().endswith("retrying with backoff")


def test_long_message_is_cut() -> None:
    error = CreateError("Pod", "p", 422, "Invalid", "x" * 5000)
    assert len(error.describe()) < 800


def test_a_create_refused_because_the_namespace_goes_is_told_apart_by_its_cause() -> None:
    # kube-apiserver's NamespaceLifecycle admission, as it answers (1.33).
    body = json.dumps({
        "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": 'pods "j-worker-0" is forbidden: unable to create new content in namespace '
                   "t-1 because it is being terminated",
        "details": {"name": "j-worker-0", "kind": "pods", "causes": [
            {"reason": "NamespaceTerminating", "message": "namespace t-1 is being terminated",
             "field": "metadata.namespace"},
            {"type": "NamespaceTerminating", "message": "namespace t-1 is being terminated",
             "field": "metadata.namespace"},
        ]},
    })  # fmt: skip
    error = create_error_of("Pod", "j-worker-0", 403, "Forbidden", body)
    assert error.namespace_terminating and not error.permanent
    assert not create_error_of("Pod", "j-worker-0", 403, "Forbidden", json.dumps(
        {"reason": "Forbidden", "message": QUOTA})).namespace_terminating  # fmt: skip

"""Create errors: is the API server's refusal to create a child the job's end, or a wait?

The executor creates what the planner asks for; when the API server refuses, the job must
say so instead of sitting in Queued or Starting with nothing in its status. A refusal the
same request will meet again (an invalid pod, a Pod Security violation, a PriorityClass
that does not exist) ends the job Failed/InvalidSpec with the API server's own message,
which names the field; anything that may clear by itself (a full quota, an overloaded or
restarting API server, a webhook timing out, throttling) is retried with backoff while a
condition says why.

What the API server answers (kube-apiserver 1.33, checked against the integration cluster):
- 422 Invalid: the pod fails validation ("spec.containers[0].image: Required value").
- 400 BadRequest: a body the server cannot decode into a pod.
- 403 Forbidden from Pod Security admission: "violates PodSecurity \"restricted:latest\"".
- 403 Forbidden from the Priority admission plugin: "no PriorityClass with name x was found".
- 403 Forbidden from ResourceQuota admission: "exceeded quota" (waits for room) or "status
  unknown for quota" (the quota controller has not computed it yet).
- 403 Forbidden from RBAC: the operator's own permissions; an admin fixes them, so a wait.
- 403 Forbidden with the cause NamespaceTerminating: "unable to create new content in
  namespace x because it is being terminated". Neither: the job goes with its namespace,
  and the reconcile leaves it alone (as the Job controller ignores that refusal).
- 429 TooManyRequests, 500 (a webhook that timed out or failed), 503, 504: transient.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# 403 messages that the same request will always meet again.
PERMANENT_FORBIDDEN = ("violates PodSecurity", "no PriorityClass with name")
PERMANENT_STATUS = frozenset({400, 422})
NAMESPACE_TERMINATING = "NamespaceTerminating"  # a metav1.Status cause
CONFLICT = 409  # an object with the child's name exists: see policies/ownership.py
MESSAGE_LIMIT = 600  # characters of the API server's message kept in a condition


@dataclass(frozen=True)
class CreateError:
    """The API server refused to create one child."""

    kind: str
    name: str
    code: int
    """HTTP status (0 when the request never got an answer)."""
    reason: str
    """The Status reason: Invalid, Forbidden, TooManyRequests, InternalError, ..."""
    message: str
    """The API server's message (it names the field for an invalid object)."""
    causes: tuple[str, ...] = ()
    """The Status' details.causes[].type."""

    @property
    def permanent(self) -> bool:
        """The same request will be refused again: retrying cannot help."""
        return is_permanent(self.code, self.message)

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the job's namespace is being deleted."""
        return self.code == 403 and NAMESPACE_TERMINATING in self.causes

    def describe(self) -> str:
        """e.g. "the API server refused to create Pod j-worker-0 (422 Invalid): ..."."""
        message = self.message
        if self.code == CONFLICT:
            return message  # policies/ownership.py wrote the whole story
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 3] + "..."
        what = f"the API server refused to create {self.kind} {self.name}"
        if self.code:
            what += f" ({self.code} {self.reason})" if self.reason else f" ({self.code})"
        text = f"{what}: {message}" if message else what
        if self.permanent:
            return text + ": fix the job's spec (pod template, priorityClassName) and re-create it"
        return text + ": retrying with backoff"


def is_permanent(code: int, message: str) -> bool:
    """Table in the module docstring: 400/422 always; 403 only for Pod Security and a
    missing PriorityClass; everything else (quota, RBAC, throttling, 5xx) may clear."""
    if code in PERMANENT_STATUS:
        return True
    if code == 403:
        return any(marker in message for marker in PERMANENT_FORBIDDEN)
    return False


def create_error_of(
    kind: str, name: str, code: int | None, reason: str, body: object
) -> CreateError:
    """A CreateError from what the client raised: `body` is the response body, a JSON
    metav1.Status when the API server answered (its message and reason are preferred)."""
    message = ""
    status_reason = reason or ""
    causes: tuple[str, ...] = ()
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            parsed = json.loads(body)
        except ValueError:
            message = body.strip()
        else:
            if isinstance(parsed, dict):
                message = str(parsed.get("message") or "")
                status_reason = str(parsed.get("reason") or status_reason)
                causes = _cause_types(parsed.get("details"))
            else:
                message = body.strip()
    return CreateError(
        kind=kind,
        name=name,
        code=int(code or 0),
        reason=status_reason,
        message=message,
        causes=causes,
    )


def _cause_types(details: object) -> tuple[str, ...]:
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ()
    return tuple(str(c["type"]) for c in causes if isinstance(c, dict) and c.get("type"))

"""The errors the SDK raises. Every one carries a one-line message a user can act on; the
CLI prints it as `error: <message>` and exits 1."""

from __future__ import annotations

from collections.abc import Sequence

from dtjob_api.errors import FieldError


class DtjobError(Exception):
    """Base of every error the SDK raises on purpose."""


class JobNotFound(DtjobError):
    """No job of that name in that namespace."""

    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(f'distributedtrainingjob "{name}" not found in namespace {namespace}')
        self.name, self.namespace = name, namespace


class InvalidJob(DtjobError):
    """The job was refused by dtjob_api's validation, before anything was sent."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("invalid job: " + "; ".join(str(e) for e in errors))
        self.errors = list(errors)


class ApiRefused(DtjobError):
    """The API server refused a request; the message is the server's own."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class WaitError(DtjobError):
    """`wait` ended without the job reaching a wanted phase."""

    def __init__(self, message: str, phase: str | None) -> None:
        super().__init__(message)
        self.phase = phase


class WaitTimeout(WaitError):
    """The timeout passed first."""


class JobEndedInOtherPhase(WaitError):
    """The job reached a terminal phase that was not wanted (e.g. Failed while waiting
    for Succeeded): it will never change again."""

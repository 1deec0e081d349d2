"""The one shape of a problem with a job that a user has to fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem with a job, tied to the field a user has to change."""

    field: str
    """Path of the field from the object's root, e.g. "spec.roles.worker.gpus"."""
    message: str
    """What is wrong and, where it helps, what to do."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

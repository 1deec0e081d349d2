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


class SpecInvalid(ValueError):
    """A spec that breaks the schema or the cross-field rules (validation.parse_spec)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("\n".join(map(str, errors)))
        self.errors = errors
        """Every problem, in the order they were found."""

"""Validation of a job in the operator: everything the CRD checks, again, in Python.

The API server refuses most bad manifests itself (schema + the CEL rules of rules.py).
This module is the backstop for clusters where the CRD was installed without them (an older
or hand-edited CRD) and the one place the operator turns a bad spec into a message a user
can act on: every error names the field, e.g.
`spec.roles.worker: required for strategy DataParallel: ...`. The operator sets such a job
Failed with reason InvalidSpec. `parse_spec` is the same check for the spec's other readers
(the bundled trainer's job config).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dtjob_api.errors import FieldError, SpecInvalid
from dtjob_api.facts import Facts
from dtjob_api.guard_rails import DEFAULT_RAILS, GuardRails, guard_rail_errors
from dtjob_api.resource_names import WHOLE_UNITS_MESSAGE, WHOLE_UNITS_PATTERN
from dtjob_api.rules import (
    IMMUTABLE_MESSAGE,
    MAX_NAME_LENGTH,
    MUTABLE_RUN_POLICY_FIELDS,
    MUTABLE_SPEC_FIELDS,
    NAME_PATTERN,
    RULES,
)
from dtjob_api.spec import (
    DNS1123_SUBDOMAIN,
    QUANTITY_PATTERN,
    DistributedTrainingJobSpec,
)
from dtjob_api.template_rules import template_errors


def validate_job(
    spec: Mapping[str, Any] | None,
    name: str | None = None,
    *,
    rails: GuardRails | None = DEFAULT_RAILS,
) -> list[FieldError]:
    """All problems of a job's spec (camelCase dict as stored); empty when it is valid.

    `name` (metadata.name), when given, is checked too. Cross-field rules, the pod template
    rules (template_rules.py) and the admin's guard rails (guard_rails.py; `rails` are the
    operator's settings, None to skip them) run only once the spec parses: they need its
    defaults.
    """
    errors = validate_name(name) if name is not None else []
    if not isinstance(spec, Mapping):
        return [*errors, FieldError("spec", "required: the job has no spec object")]
    try:
        parsed = DistributedTrainingJobSpec.model_validate(spec)
    except ValidationError as e:
        return errors + [_from_pydantic(d) for d in e.errors()]
    return (
        errors
        + cross_field_errors(parsed)
        + template_errors(parsed, rails)
        + (guard_rail_errors(parsed, rails) if rails is not None else [])
    )


def parse_spec(
    spec: Mapping[str, Any], *, root: str = "spec", bundled_trainer: bool | None = None
) -> DistributedTrainingJobSpec:
    """The spec parsed (defaults filled in) and held to the schema and the cross-field
    rules: what a reader of a spec other than the operator checks (the bundled trainer
    reads its job config with it). Raises SpecInvalid listing every problem, each field
    named by its path under `root` ("" for paths relative to the spec itself).

    The pod template's rules are not checked: they are the operator's and depend on its
    settings. `bundled_trainer`: whether the bundled trainer's rules apply (None: when
    trainer.command is unset, as for the API server and the operator).
    """
    try:
        parsed = DistributedTrainingJobSpec.model_validate(spec)
    except ValidationError as e:
        raise SpecInvalid([_from_pydantic(d, root) for d in e.errors()]) from None
    errors = cross_field_errors(parsed, root=root, bundled_trainer=bundled_trainer)
    if errors:
        raise SpecInvalid(errors)
    return parsed


def cross_field_errors(
    spec: DistributedTrainingJobSpec, *, root: str = "spec", bundled_trainer: bool | None = None
) -> list[FieldError]:
    """The rules of rules.RULES that a parsed spec breaks, in table order (`root` and
    `bundled_trainer` as in parse_spec)."""
    facts = Facts.of(spec)
    if bundled_trainer is not None:
        facts = replace(facts, bundled_trainer=bundled_trainer)
    return [FieldError(_join(root, r.field), r.render(facts)) for r in RULES if not r.check(facts)]


def validate_name(name: str) -> list[FieldError]:
    """metadata.name problems (the same as the CRD's root rules)."""
    errors = []
    if len(name) > MAX_NAME_LENGTH:
        errors.append(
            FieldError(
                "metadata.name",
                f"must be at most {MAX_NAME_LENGTH} characters: pod names <name>-<role>-<index> "
                f"must fit a 63-character DNS label (got {len(name)})",
            )
        )
    if not re.match(NAME_PATTERN, name):
        errors.append(
            FieldError(
                "metadata.name",
                "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a "
                f"letter and ending with a letter or digit (got {name!r})",
            )
        )
    return errors


def immutable_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    """Spec fields changed although only suspend and the runPolicy deadline and TTL may.

    Both specs are compared with their defaults filled in, as the API server stores them.
    Unparseable specs compare as raw dicts.
    """
    before, after = _with_defaults(old), _with_defaults(new)
    errors = []
    for key in sorted(set(before) | set(after)):
        if key == "runPolicy":
            old_rp, new_rp = before.get(key) or {}, after.get(key) or {}
            for sub in sorted(set(old_rp) | set(new_rp)):
                if sub not in MUTABLE_RUN_POLICY_FIELDS and old_rp.get(sub) != new_rp.get(sub):
                    errors.append(FieldError(f"spec.runPolicy.{sub}", IMMUTABLE_MESSAGE))
        elif key not in MUTABLE_SPEC_FIELDS and before.get(key) != after.get(key):
            errors.append(FieldError(f"spec.{key}", IMMUTABLE_MESSAGE))
    return errors


def _with_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return DistributedTrainingJobSpec.model_validate(spec).to_api()
    except ValidationError:
        return dict(spec)


def _join(root: str, path: str) -> str:
    return f"{root}.{path}" if root else path


def _from_pydantic(error: ErrorDetails, root: str = "spec") -> FieldError:
    """A pydantic error as `<root>.<camelCase path>: <message>`."""
    path = root
    for part in error["loc"]:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        message = "required"
    elif kind == "extra_forbidden":
        message = "unknown field (check the spelling; field names are camelCase)"
    elif kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == (
        QUANTITY_PATTERN
    ):
        message = f"must be a Kubernetes quantity such as 500m, 4 or 16Gi (got {value!r})"
    elif kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == (
        WHOLE_UNITS_PATTERN
    ):
        message = f"{WHOLE_UNITS_MESSAGE} (got {value!r})"
    elif kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == (
        DNS1123_SUBDOMAIN
    ):
        message = (
            "must be a DNS-1123 subdomain, like a PersistentVolumeClaim name: lowercase "
            "letters, digits, '-' and '.', starting and ending with a letter or digit "
            f"(got {value!r})"
        )
    else:
        message = error["msg"]
        if isinstance(value, str | int | float | bool):
            message += f" (got {value!r})"
    return FieldError(path, message)

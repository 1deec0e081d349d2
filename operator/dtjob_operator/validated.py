"""The planner's check of a job's spec, made once per spec: every reconcile of a job checks
the spec it plans from, and in a burst of 200 gangs the schema's parse and the rules
(cross-field, pod template, guard rails) were a share of every pass's planning (py-spy),
for specs that had not changed since the last pass. The memo is keyed by the spec's own bytes (a
digest of its JSON) and the guard rails, nothing else goes into the verdict; the name is
checked apart (cheap), so the jobs of one template share an entry."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from dtjob_api.errors import FieldError
from dtjob_api.guard_rails import GuardRails
from dtjob_api.validation import validate_job, validate_name

# Specs whose verdicts are kept; past it the memo starts again (a verdict is a few errors,
# usually none: 4,096 of them are well under a megabyte).
MAX_KEPT = 4096

_kept: dict[tuple[object, ...], tuple[FieldError, ...]] = {}
_lock = threading.Lock()


def spec_errors(
    spec: Mapping[str, Any] | None, name: str | None, rails: GuardRails | None
) -> list[FieldError]:
    """validate_job(spec, name, rails=rails), from the memo when this spec was checked."""
    named = validate_name(name) if name is not None else []
    try:
        text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON (a hand-made object): checked every time
        return [*named, *validate_job(spec, rails=rails)]
    key = (rails, hashlib.blake2b(text.encode(), digest_size=16).digest())
    with _lock:
        found = _kept.get(key)
    if found is None:
        found = tuple(validate_job(spec, rails=rails))
        with _lock:
            if len(_kept) >= MAX_KEPT:
                _kept.clear()
            _kept[key] = found
    return [*named, *found]

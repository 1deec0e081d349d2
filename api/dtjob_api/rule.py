"""One cross-field rule of the spec (rules.py holds the table): its condition and
requirement in CEL and in Python, and its message, rendered for the API server (a CEL
message expression, or words where it cannot say a value) and for the operator (with the
numbers behind a refusal)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from dtjob_api.facts import MODE, SCHEDULE, STRATEGY, Facts

# Placeholders a message may use -> (CEL string expression, words for the API server's
# fallback). Only enum-valued ones: the server's cost estimate of `"..." + string(int)`
# is unbounded and it refuses the CRD, so numbers go into a rule's Python-only `detail`.
PLACEHOLDERS: dict[str, tuple[str, str]] = {
    "strategy": (STRATEGY, "<spec.strategy.type>"),
    "mode": (MODE, "<spec.strategy.parameterServer.mode>"),
    "schedule": (SCHEDULE, "<spec.strategy.pipeline.schedule>"),
}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: a spec is valid when the rule does not apply or holds."""

    field: str
    """Path under spec the rule is about, e.g. "roles.worker" (the CEL fieldPath)."""
    when: str
    """CEL: the rule applies."""
    when_py: Callable[[Facts], bool]
    """Python twin of `when`."""
    require: str
    """CEL: what must hold when it applies."""
    require_py: Callable[[Facts], bool]
    """Python twin of `require`."""
    message: str
    """Message template; its {placeholders} are keys of PLACEHOLDERS."""
    reason: str = "FieldValueInvalid"
    """CEL reason: FieldValueInvalid, FieldValueRequired or FieldValueForbidden."""
    detail: str = ""
    """Numbers behind a refusal, added by the operator only; any Facts attribute may be a
    placeholder here."""

    @property
    def cel(self) -> str:
        """The CEL rule: true when the spec is valid."""
        return self.require if self.when == "true" else f"!({self.when}) || ({self.require})"

    def check(self, facts: Facts) -> bool:
        """The rule in Python: True when the spec is valid."""
        return not self.when_py(facts) or self.require_py(facts)

    def render(self, facts: Facts) -> str:
        """The message for a spec that breaks the rule, with the detail if there is one."""
        text = _fill(self.message, facts)
        return f"{text} ({_fill(self.detail, facts)})" if self.detail else text

    def message_expression(self) -> str | None:
        """The message as a CEL string expression, or None when it has no placeholders."""
        parts = _PLACEHOLDER.split(self.message)
        if len(parts) == 1:
            return None
        # split() alternates literal text and placeholder names.
        pieces = [PLACEHOLDERS[p][0] if i % 2 else json.dumps(p) for i, p in enumerate(parts) if p]
        return " + ".join(pieces)

    def static_message(self) -> str:
        """The message with placeholders in words: the API server's fallback."""
        return _PLACEHOLDER.sub(lambda m: PLACEHOLDERS[m.group(1)][1], self.message)


# Placeholders read from a Facts attribute of another name: a message names the strategy as
# written (a tf.distribute alias included), as CEL's self.strategy.type does.
_FACT_OF_PLACEHOLDER = {"strategy": "declared"}


def _fill(template: str, facts: Facts) -> str:
    return _PLACEHOLDER.sub(
        lambda m: str(getattr(facts, _FACT_OF_PLACEHOLDER.get(m.group(1), m.group(1)))), template
    )

"""Reading the parameter-server strategies' result line in tests."""

from __future__ import annotations

import re


def applied_and_pushed(message: str) -> tuple[int, int]:
    """(applied, pushed) from 'parameter servers applied A of P pushed updates'."""
    found = re.search(r"applied (\d+) of (\d+) pushed updates", message)
    assert found, f"no update totals in the result message {message!r}"
    return int(found.group(1)), int(found.group(2))

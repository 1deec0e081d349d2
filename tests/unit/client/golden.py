"""Exact comparison with a file under golden/; DTJOB_UPDATE_GOLDEN=1 rewrites the files
(then read the diff before committing it)."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("DTJOB_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with DTJOB_UPDATE_GOLDEN=1 and review it"
    expected = path.read_text()
    assert text == expected, f"{name} differs from the golden file:\n{text}"

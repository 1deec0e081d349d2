"""The GPU kit's pins (requirements/gpu-kit.txt) are what the project venv resolved for
the trainer's pydantic: a pydantic bumped in requirements/trainer.txt without its
dependencies in the kit would break the GPU machine's imports, caught otherwise only by
the rehearsal. Runs in the project venv, whose versions are the reference."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"


def pins(name: str) -> dict[str, str]:
    found = {}
    for line in (REQUIREMENTS / name).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found


def test_the_kit_pins_what_the_project_venv_runs() -> None:
    kit = pins("gpu-kit.txt")
    assert {"pydantic-core", "annotated-types", "typing-inspection"} <= set(kit)
    for name, pinned in kit.items():
        assert version(name) == pinned, f"requirements/gpu-kit.txt pins {name}=={pinned}"


def test_pydantic_travels_at_the_trainers_pin() -> None:
    assert pins("trainer.txt")["pydantic"] == version("pydantic")

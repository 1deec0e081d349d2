"""What the rehearsal must show beyond gpu-check's own exit status: that it ran
everything, skipped the CUDA tests for the right reason, and wrote the no-CUDA record.

    python hack/gpu_rehearsal_verdict.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def verdict(out: Path) -> list[str]:
    """The rehearsal's failures, none when it showed all it should."""
    problems = []
    suite = ET.parse(out / "tests-gpu.xml").getroot().find("testsuite")
    assert suite is not None, "junit XML without a testsuite"
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    if counts["failures"] or counts["errors"]:
        problems.append(f"tests/gpu: {counts}")
    cuda_skips = 0
    for case in suite.iter("testcase"):
        skipped = case.find("skipped")
        if case.get("classname", "").endswith("test_strategies_cuda"):
            if skipped is None or "no CUDA device" not in skipped.get("message", ""):
                problems.append(f"{case.get('name')}: ran or skipped for another reason")
            else:
                cuda_skips += 1
        elif skipped is not None:
            problems.append(f"{case.get('name')}: skipped ({skipped.get('message')})")
    if cuda_skips == 0:
        problems.append("no CUDA test was collected")
    record = json.loads((out / "gpu.json").read_text())
    if record.get("skipped") != "no CUDA device visible to torch":
        problems.append(f"bench/gpu.py did not take its no-CUDA path: {record}")
    return problems


def main() -> None:
    out = Path(sys.argv[1])
    problems = verdict(out)
    for p in problems:
        print(f"gpu-rehearsal: {p}", file=sys.stderr)
    print("gpu-rehearsal:", "FAILED" if problems else "passed", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

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
        if case.get("classname", "").endswith("_cuda"):  # test_*_cuda.py: CUDA only
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
    elif not record.get("rehearsal"):
        problems.append("bench/gpu.py did not rehearse its measurements on the CPU")
    else:
        for section in REHEARSED:
            if section not in record:
                problems.append(f"bench/gpu.py's rehearsal has no {section!r}")
        problems += [f"bench/gpu.py rehearsal: {where}: {what}" for where, what in faults(record)]
    return problems


# What bench/gpu.py's rehearsal must have run (bench/gpu_claims.py's sections under claims).
REHEARSED = ("throughput_bf16", "throughput_bf16_compiled", "profile", "bigger", "claims")


def faults(node: object, where: str = "") -> list[tuple[str, str]]:
    """Every "error" or "skipped" entry in a rehearsal record, with where it sits: in a
    rehearsal every measurement must run (a skip there would hide an untested path)."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key in ("error", "skipped"):
            if key in node and where:
                found.append((where, str(node[key])[:200]))
        for key, value in node.items():
            if key != "skipped" or where:
                found += faults(value, f"{where}.{key}" if where else key)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += faults(value, f"{where}[{i}]")
    return found


def main() -> None:
    out = Path(sys.argv[1])
    problems = verdict(out)
    for p in problems:
        print(f"gpu-rehearsal: {p}", file=sys.stderr)
    print("gpu-rehearsal:", "FAILED" if problems else "passed", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

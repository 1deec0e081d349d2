"""Print an examples/cpu manifest placed on the real node, for `kubectl apply -f -`.

The real node carries the label and NoSchedule taint dtjob.io/node=real, so the fake GPU
nodes' tests never land there; a job meant for it says so through spec.roles.*.template
(the pod-template overlay every role accepts). The CPU requests are scaled down to fit
every example's gang (up to 4 pods) on a 2-core machine.

Usage: realnode_overlay.py MANIFEST [--cpu 250m] [--name NAME] [--claim PVC] [--steps N]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

LABEL = "dtjob.io/node"


def place_on_real_node(job: dict[str, Any], cpu: str) -> dict[str, Any]:
    for role in job["spec"]["roles"].values():
        if not role:
            continue
        tpl = role.setdefault("template", {})
        tpl.setdefault("nodeSelector", {})[LABEL] = "real"
        tpl.setdefault("tolerations", []).append(
            {"key": LABEL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}
        )
        role["cpu"] = cpu
    return job


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("manifest")
    p.add_argument("--cpu", default="250m")
    p.add_argument("--name")
    p.add_argument("--claim")
    p.add_argument("--steps", type=int)
    p.add_argument("--every", type=int, help="checkpoint every N steps")
    a = p.parse_args()
    with open(a.manifest) as f:
        # A manifest may carry other objects along (custom-model: the ConfigMap of its code).
        docs = [d for d in yaml.safe_load_all(f) if d]
    job = next(d for d in docs if d.get("kind") == "DistributedTrainingJob")
    place_on_real_node(job, a.cpu)
    if a.name:
        job["metadata"]["name"] = a.name
    if a.claim:
        job["spec"].setdefault("checkpoint", {})["claimName"] = a.claim
    if a.every:
        job["spec"].setdefault("checkpoint", {})["everySteps"] = a.every
    if a.steps:
        job["spec"]["trainer"]["steps"] = a.steps
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()

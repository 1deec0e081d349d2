"""The admission pass's tally of what pods hold (admission/usage.PodTally), carried from
pass to pass: the same figures as counting every pod afresh, whatever happened between
two passes. The burst benchmark's CPU figure rests on it."""

from __future__ import annotations

import random
from typing import Any

from dtjob_operator.admission.resources import pod_host_ports, pod_requests
from dtjob_operator.admission.snapshot import build_snapshot
from dtjob_operator.admission.usage import PodTally
from dtjob_operator.constants import LABEL_JOB_NAME

Pod = dict[str, Any]


def _reference(pods: list[Pod]) -> tuple[dict[str, dict[str, int]], ...]:
    """Every pod counted from nothing, as a pass did before the tally."""
    ns_used: dict[str, dict[str, int]] = {}
    node_used: dict[str, dict[str, int]] = {}
    ports: dict[str, set[str]] = {}
    for pod in pods:
        if pod["status"]["phase"] in ("Succeeded", "Failed"):
            continue
        req = pod_requests(pod["spec"])
        for key, value in req.items():
            ns = ns_used.setdefault(pod["metadata"]["namespace"], {})
            ns[key] = ns.get(key, 0) + value
        node = pod["spec"].get("nodeName")
        if node:
            for key, value in req.items():
                used = node_used.setdefault(node, {})
                used[key] = used.get(key, 0) + value
            ports.setdefault(node, set()).update(pod_host_ports(pod["spec"]))
    nonzero = lambda d: {k: {r: v for r, v in x.items() if v} for k, x in d.items()}  # noqa: E731
    return (
        {k: v for k, v in nonzero(ns_used).items() if v},
        {k: v for k, v in nonzero(node_used).items() if v},
        {k: v for k, v in ports.items() if v},
    )


def _figures(tally: PodTally) -> tuple[dict[str, Any], ...]:
    ports = {k: v for k, v in tally.node_ports().items() if v}
    return tally.namespaces_used(), tally.nodes_used(), ports


def _a_pod(rng: random.Random, name: str, version: int) -> Pod:
    container: dict[str, Any] = {
        "name": "c",
        "resources": {"requests": {"cpu": rng.choice(["100m", "1", "2500m"]),
                                   "nvidia.com/gpu": str(rng.choice([0, 1, 8]))}},
    }  # fmt: skip
    if rng.random() < 0.2:
        container["ports"] = [{"containerPort": 80, "hostPort": rng.choice([8080, 9090])}]
    spec: dict[str, Any] = {"containers": [container]}
    if rng.random() < 0.7:
        spec["nodeName"] = rng.choice(["n1", "n2", "n3"])
    return {
        "metadata": {
            "name": name,
            "namespace": rng.choice(["a", "b"]),
            "uid": f"{name}-{rng.choice([1, 2])}",
            "resourceVersion": str(version),
            "labels": {LABEL_JOB_NAME: f"j{rng.randrange(4)}"} if rng.random() < 0.8 else {},
        },
        "spec": spec,
        "status": {"phase": rng.choice(["Pending", "Running", "Running", "Succeeded", "Failed"])},
    }


def test_a_carried_tally_counts_as_a_fresh_one_through_random_histories() -> None:
    rng = random.Random(38)
    for _ in range(60):
        tally = PodTally()
        pods: dict[str, Pod] = {}
        version = 0
        for _ in range(25):
            for _ in range(rng.randrange(1, 6)):  # pods come, change (a new version) or go
                version += 1
                name = f"p{rng.randrange(12)}"
                if name in pods and rng.random() < 0.3:
                    del pods[name]
                else:
                    pods[name] = _a_pod(rng, name, version)
            listed = list(pods.values())
            rng.shuffle(listed)  # a cache lists in no set order
            tally.update(
                listed, lambda p: pod_requests(p["spec"]), lambda p: pod_host_ports(p["spec"])
            )
            assert _figures(tally) == _reference(listed)
            fresh = PodTally()
            fresh.update(
                listed, lambda p: pod_requests(p["spec"]), lambda p: pod_host_ports(p["spec"])
            )
            by_job = tally.pods_by_job()
            assert {k: list(by_job[k]) for k in by_job} == {
                k: list(fresh.pods_by_job()[k]) for k in fresh.pods_by_job()
            }
            for key in by_job:
                assert tally.job_versions(key) == fresh.job_versions(key)


def test_an_unchanged_pod_is_not_counted_again() -> None:
    rng = random.Random(1)
    pods = [_a_pod(rng, f"p{i}", i) for i in range(5)]
    asked: list[str] = []

    def requests(pod: Pod) -> dict[str, int]:
        asked.append(pod["metadata"]["name"])
        return pod_requests(pod["spec"])

    tally = PodTally()
    tally.update(pods, requests, lambda p: ())
    first = len(asked)
    tally.update(pods, requests, lambda p: ())
    assert len(asked) == first  # nothing moved: nothing counted again
    pods[0] = {**pods[0], "metadata": {**pods[0]["metadata"], "resourceVersion": "99"},
               "status": {"phase": "Running"}}  # fmt: skip
    tally.update(pods, requests, lambda p: ())
    assert asked[first:] == ["p0"]


def test_a_pass_with_a_carried_tally_frees_the_room_of_a_finished_pod() -> None:
    node = {
        "metadata": {"name": "n1"},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    pod = {
        "metadata": {"name": "p", "namespace": "a", "uid": "u", "resourceVersion": "1"},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    tally = PodTally()

    def free() -> dict[str, int]:
        snap = build_snapshot(jobs=[], pods=[pod], nodes=[node], quotas=[], priority_classes=[],
                              gang_of=lambda j: None, admitted=lambda j: False,
                              not_before=lambda j: None, now=None, tally=tally)  # type: ignore[arg-type]  # fmt: skip
        return snap.nodes[0].free

    assert free()["nvidia.com/gpu"] == 0
    pod = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"},
           "status": {"phase": "Succeeded"}}  # fmt: skip
    assert free()["nvidia.com/gpu"] == 8

"""The operator at rest makes (almost) no API requests: with 20 running jobs, once its
caches are warm it neither polls the jobs nor lists their pods or ConfigMaps, and its
admission passes read the caches. Counted by the API server itself
(`apiserver_request_total`, WATCH excluded), over a window with the operator running minus
a window of the same length with it stopped, on the resources the operator reads or writes.
The operator watches the test's namespace alone (bench/api_load.py measures the whole-cluster
mode, with 100 and 1,000 jobs): other tests' jobs may still be going away elsewhere.

Polling (before the caches) cost about three requests per running job every 5 s: over
this window, some 360 requests.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from helpers.apimetrics import Key, per_second, window
from helpers.jobs import GROUP, PLURAL, VERSION, JobBuilder, create_job
from helpers.kube import wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]

JOBS, PODS_PER_JOB = 20, 2
WINDOW = 30.0
SETTLE = 15.0  # the last status writes, and a resync of every job from the caches
QUIET_WAIT = 60.0
# What the operator does at rest: a write now and then is allowed (none is expected).
MAX_REQUESTS = 5
# The objects the operator reads or writes. Leases and nodes are left out: the fake
# nodes' heartbeats and the controllers' leader leases are many and vary between windows;
# the operator runs standalone here (no Lease of its own).
OPERATOR_RESOURCES = {
    PLURAL, "pods", "configmaps", "services", "events", "resourcequotas", "priorityclasses",
    "persistentvolumeclaims", "networkpolicies", "poddisruptionbudgets",
}  # fmt: skip


def _running(api: client.ApiClient, namespace: str) -> int:
    custom = client.CustomObjectsApi(api)
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return sum(1 for j in items if (j.get("status") or {}).get("phase") == "Running")


def _ours(counts: Counter[Key]) -> Counter[Key]:
    return Counter({k: n for k, n in counts.items() if k[1].split("/")[0] in OPERATOR_RESOURCES})


@pytest.fixture
def operator(cluster, crd, namespace, tmp_path) -> Iterator[OperatorProcess]:  # type: ignore[no-untyped-def]
    """An operator of this test's namespace alone: jobs other tests left behind in namespaces
    still being deleted would otherwise keep it busy in the window."""
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", {
        "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test", "DTJOB_NAMESPACES": namespace,
    })  # fmt: skip
    proc.start()
    yield proc
    proc.stop()


def test_at_rest_the_operator_makes_next_to_no_api_requests(cluster, namespace, operator) -> None:  # type: ignore[no-untyped-def]
    def job(i: int) -> dict:  # type: ignore[type-arg]
        built = JobBuilder(f"rest-{i}").role("worker", PODS_PER_JOB, cpu="10m").build()
        built["spec"]["trainer"]["batchSize"] = 8 * PODS_PER_JOB
        return built

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: create_job(cluster.api, namespace, job(i)), range(JOBS)))
    wait_for(lambda: _running(cluster.api, namespace) == JOBS, timeout=180, interval=1,
             what=f"{JOBS} running jobs")  # fmt: skip
    time.sleep(SETTLE)
    # On a loaded machine the cluster itself can take a while to settle after 40 pods came
    # up (the garbage collector checking their owners, for one): wait for quiet first. An
    # operator that polls is never quiet, and fails below all the same.
    quiet_by = time.monotonic() + QUIET_WAIT
    while time.monotonic() < quiet_by and sum(_ours(window(cluster.api, 5)).values()) > 1:
        pass
    with_operator = _ours(window(cluster.api, WINDOW))
    operator.stop()
    time.sleep(3)  # its last calls are counted before the second window
    without = _ours(window(cluster.api, WINDOW))
    caused = Counter(with_operator)
    caused.subtract(without)
    total = sum(caused.values())
    print(f"operator's requests over {WINDOW:.0f}s at rest with {JOBS} running jobs: {total} "
          f"(with {per_second(with_operator, 1)}, without {per_second(without, 1)})")  # fmt: skip
    assert total <= MAX_REQUESTS, (
        f"the operator made {total} requests in {WINDOW:.0f}s at rest with {JOBS} running "
        f"jobs (at most {MAX_REQUESTS} expected): {per_second(caused, 1)}; see {operator.log}"
    )

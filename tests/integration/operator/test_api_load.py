"""The operator at rest makes (almost) no API requests: with 20 running jobs, once its
caches are warm it neither polls the jobs nor lists their pods or ConfigMaps, and its
admission passes read the caches. Counted by the operator's own client
(`dtjob_api_requests_total` on its /metrics, every request but WATCHes) over 30 s.

The API server's own count (`apiserver_request_total`) has no client label: bench/api_load.py
isolates the operator there by a window without it, which on a cluster other tests share is
noisy (a namespace being deleted lists and deletes every kind). Polling (before the caches)
cost about three requests per running job every 5 s: over this window, some 360.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from helpers.apimetrics import requests_sent
from helpers.jobs import GROUP, PLURAL, VERSION, JobBuilder, create_job
from helpers.kube import wait_for
from helpers.operator import OperatorProcess

pytestmark = [pytest.mark.integration]

JOBS, PODS_PER_JOB = 20, 2
WINDOW = 30.0
SETTLE = 15.0  # the last status writes, and a resync of every job from the caches
# What the operator does at rest: a write now and then is allowed (none is expected).
MAX_REQUESTS = 5


def _running(api: client.ApiClient, namespace: str) -> int:
    custom = client.CustomObjectsApi(api)
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return sum(1 for j in items if (j.get("status") or {}).get("phase") == "Running")


def test_at_rest_the_operator_makes_next_to_no_api_requests(
    cluster: Any, namespace: str, metered_operator: OperatorProcess, metrics_port: int
) -> None:
    def job(i: int) -> dict[str, Any]:
        built = JobBuilder(f"rest-{i}").role("worker", PODS_PER_JOB, cpu="10m").build()
        built["spec"]["trainer"]["batchSize"] = 8 * PODS_PER_JOB
        return built

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: create_job(cluster.api, namespace, job(i)), range(JOBS)))
    wait_for(lambda: _running(cluster.api, namespace) == JOBS, timeout=180, interval=1,
             what=f"{JOBS} running jobs")  # fmt: skip
    busy = requests_sent(metrics_port)
    assert sum(busy.values()) > JOBS * PODS_PER_JOB  # the counter counts: every pod created
    time.sleep(SETTLE)
    before = requests_sent(metrics_port)
    time.sleep(WINDOW)
    caused = requests_sent(metrics_port)
    caused.subtract(before)
    total = sum(caused.values())
    rows = {f"{verb} {resource}": n for (verb, resource), n in caused.items() if n}
    print(
        f"operator's requests over {WINDOW:.0f}s at rest with {JOBS} running jobs: {total} {rows}"
    )
    assert total <= MAX_REQUESTS, (
        f"the operator made {total} requests in {WINDOW:.0f}s at rest with {JOBS} running "
        f"jobs (at most {MAX_REQUESTS} expected): {rows}; see {metered_operator.log}"
    )

"""/healthz of a real operator process turns 503 when a reconcile worker is really stuck
against the real API server, within DTJOB_LIVENESS_STUCK_SECONDS, and is 200 otherwise;
/readyz turns 200 once the operator has started, and a stuck worker does not change it.

What blocks the worker is no hook in the operator: a validating webhook (helpers/webhook.py)
holds the job's pod creates, so the worker waits in a real create call, as it would behind
a slow webhook or an overloaded API server; the API server would time it out after 30 s,
and the test releases it before.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from helpers.jobs import JobBuilder, create_job, wait_phase
from helpers.kube import unique, wait_for
from helpers.operator import OperatorProcess
from helpers.webhook import HoldingWebhook

pytestmark = [pytest.mark.integration]

STUCK_SECONDS = 10  # the least the setting allows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def probe(url: str) -> tuple[int, str]:
    """(HTTP status, reason) of one liveness probe; 0 when nothing answers (yet)."""
    try:
        with NO_PROXY.open(url, timeout=3) as answer:
            return answer.status, json.loads(answer.read())["reason"]
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())["reason"]
    except urllib.error.URLError as error:
        return 0, str(error.reason)


def probes_for(url: str, seconds: float) -> list[tuple[int, str]]:
    """Probe every 0.25 s for `seconds`."""
    deadline, seen = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        seen.append(probe(url))
        time.sleep(0.25)
    return seen


def ddp(name: str) -> dict[str, object]:
    return JobBuilder(name).strategy("DataParallel").role("worker", 2, gpus=1).build()


def test_healthz_fails_while_a_worker_is_stuck_in_an_api_call_and_recovers(
    cluster, crd, namespace, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    api = cluster.api
    url = f"http://127.0.0.1:{free_port()}/healthz"
    env = {
        "DTJOB_TRAINER_IMAGE": "dtjob/trainer:test",
        "DTJOB_NAMESPACES": namespace,
        "DTJOB_LIVENESS_ENDPOINT": url,
        "DTJOB_LIVENESS_STUCK_SECONDS": str(STUCK_SECONDS),
    }
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", env)
    operator.start()
    try:
        wait_for(lambda: probe(url)[0] == 200, timeout=30, what="/healthz answering 200")
        ready = url.replace("/healthz", "/readyz")
        wait_for(lambda: probe(ready)[0] == 200, timeout=30, what="/readyz answering 200")
        # Healthy while it works normally: a job reconciled from creation to Running.
        create_job(api, namespace, ddp("fine"))
        wait_phase(api, namespace, "fine", "Running")
        assert {code for code, _ in probes_for(url, 2)} == {200}

        with HoldingWebhook(api, namespace, tmp_path) as webhook:
            stuck = unique("stuck")
            create_job(api, namespace, ddp(stuck))
            wait_for(lambda: webhook.held, timeout=30, what="the job's pod create held")
            since = webhook.held[0]  # the worker has been in this reconcile since just before
            # Healthy for most of the window, then 503 naming the job.
            early = probes_for(url, since + STUCK_SECONDS - 2 - time.monotonic())
            assert {code for code, _ in early} == {200}, early
            _, reason = wait_for(
                lambda: (p := probe(url))[0] == 503 and p,
                timeout=5,
                interval=0.25,
                what="/healthz answering 503",
            )
            turned = time.monotonic() - since
            assert f"reconcile of {namespace}/{stuck} in flight" in reason, reason
            assert STUCK_SECONDS - 2 < turned <= STUCK_SECONDS + 3, turned
            assert probe(ready) == (200, "ok")  # stuck is for liveness to judge, not readiness
            # The webhook lets the creates through: the worker is free, healthy again.
            webhook.release()
            wait_for(lambda: probe(url)[0] == 200, timeout=10, what="/healthz back to 200")
            recovered = time.monotonic() - since
        wait_phase(api, namespace, stuck, "Running")
        assert {code for code, _ in probes_for(url, 2)} == {200}
    finally:
        operator.stop()
    print(f"\n/healthz 503 {turned:.1f}s after the create was held (limit {STUCK_SECONDS}s): "
          f"{reason}; 200 again {recovered:.1f}s after it was held")  # fmt: skip

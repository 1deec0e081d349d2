"""The progress helper any code can use (dtjob_trainer/report.py), against a real local
HTTPS server standing in for the API server."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import HTTPServer
from pathlib import Path
from typing import Any

import pytest
from unit.trainer.fake_apiserver import ApiServer
from unit.trainer.test_progress import _self_signed

from dtjob_trainer import report as helper
from dtjob_trainer.report import (
    PROGRESS_KEY,
    ConfigMapClient,
    Reporter,
    hf_callback,
    lightning_callback,
    report,
    reporter_from_env,
)


class Api:
    """A TLS server with the service account's files, and the pod's env pointing at it."""

    def __init__(self, tmp_path: Path) -> None:
        key, cert = _self_signed(tmp_path)
        (tmp_path / "token").write_text("sa-token\n")
        self.sa_dir = str(tmp_path)
        self.handler: type[ApiServer] = type("H", (ApiServer,), {"requests": [], "status": 200})
        self.server = HTTPServer(("127.0.0.1", 0), self.handler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.env = {
            "RANK": "0",
            "DTJ_NAMESPACE": "team",
            "DTJ_PROGRESS_CONFIGMAP": "j-progress",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.server.server_port),
        }

    def documents(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]["data"][PROGRESS_KEY]) for r in self.handler.requests]

    def reporter(self, **env: str) -> Reporter:
        return reporter_from_env({**self.env, **env}, sa_dir=self.sa_dir)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    server = Api(tmp_path)
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def default_reporter(api: Api, monkeypatch: pytest.MonkeyPatch) -> Reporter:
    """report() as in a pod: the module's reporter made from the pod's env."""
    reporter = api.reporter()
    monkeypatch.setattr(helper, "_default", reporter)
    return reporter


def test_report_patches_the_job_configmap_with_the_sa_token(
    api: Api, default_reporter: Reporter
) -> None:
    assert report(step=10, total=100, loss=0.5, epoch=1, samples_per_sec=1234.5, checkpoint=10)
    (req,) = api.handler.requests
    assert req["path"] == "/api/v1/namespaces/team/configmaps/j-progress"
    assert req["headers"]["Authorization"] == "Bearer sa-token"
    assert req["headers"]["Content-Type"] == "application/merge-patch+json"
    (doc,) = api.documents()
    assert {k: doc[k] for k in ("step", "totalSteps", "loss", "epoch", "samplesPerSecond")} == {
        "step": 10,
        "totalSteps": 100,
        "loss": 0.5,
        "epoch": 1,
        "samplesPerSecond": 1234.5,
    }
    assert doc["lastCheckpointStep"] == 10
    assert doc["lastCheckpointTime"].endswith("Z") and doc["updateTime"].endswith("Z")


def test_reports_are_rate_limited_and_keep_the_latest_values(
    api: Api, default_reporter: Reporter
) -> None:
    assert report(step=1, total=50, loss=2.0)
    assert not report(step=2, loss=1.5)  # within the interval: remembered, not written
    assert report(step=3, force=True)
    first, last = api.documents()
    assert first["step"] == 1
    # Fields not given again keep their last value.
    assert (last["step"], last["loss"], last["totalSteps"]) == (3, 1.5, 50)


def test_only_rank_zero_writes(api: Api) -> None:
    assert not api.reporter(RANK="3").update({"step": 1}, force=True)
    assert api.reporter(RANK="0").update({"step": 1}, force=True)
    assert len(api.handler.requests) == 1


def test_outside_a_pod_nothing_is_sent() -> None:
    assert reporter_from_env({"RANK": "0"}).sink is None
    assert ConfigMapClient.from_env({"KUBERNETES_SERVICE_HOST": "h"}) is None


def test_failures_never_reach_the_training_loop(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    api.handler.status = 500
    reporter = api.reporter()
    assert not reporter.update({"step": 1}, force=True)
    dead = Reporter(ConfigMapClient("https://127.0.0.1:1/x", "/nonexistent", None, timeout=1))
    assert not dead.update({"step": 1}, force=True)
    assert not reporter.update({"loss": "not a number"}, force=True)
    assert reporter.failures == 2
    assert "progress report failed" in caplog.text


def test_non_finite_numbers_are_dropped(api: Api) -> None:
    reporter = api.reporter()
    reporter.update({"loss": 0.25})
    assert reporter.update({"step": 2, "loss": float("nan")}, force=True)
    assert api.documents()[0]["loss"] == 0.25


def test_eta_from_the_step_rate() -> None:
    now = [0.0]
    reporter = Reporter(None, clock=lambda: now[0])
    reporter.update({"step": 10, "totalSteps": 110})
    now[0] = 20.0
    reporter.update({"step": 30})  # 20 steps in 20 s: 80 left -> 80 s
    assert reporter.fields["etaSeconds"] == 80.0


# -- framework adapters, with stand-ins for their base classes ----------------------------
# transformers and lightning are not dependencies of the trainer; where they are missing the
# adapters are driven the way each framework calls its callbacks.


class _State:
    global_step, max_steps, epoch = 40, 200, 1.6


class _LightningTrainer:
    global_step, max_steps, current_epoch = 7, -1, 0
    estimated_stepping_batches = 70


def test_hf_callback_reports_logs_and_saves(api: Api, default_reporter: Reporter) -> None:
    callback = hf_callback(base=object)
    callback.on_log(None, _State(), None, logs={"loss": 0.75, "learning_rate": 1e-4})
    callback.on_save(None, _State(), None)
    logged, saved = api.documents()
    assert (logged["step"], logged["totalSteps"], logged["epoch"], logged["loss"]) == (
        40,
        200,
        1,
        0.75,
    )
    assert saved["lastCheckpointStep"] == 40


def test_lightning_callback_reports_batches_and_checkpoints(
    api: Api, default_reporter: Reporter
) -> None:
    callback = lightning_callback(base=object)
    callback.on_train_batch_end(_LightningTrainer(), None, {"loss": 1.25}, None, 6)
    callback.on_save_checkpoint(_LightningTrainer(), None, {})
    batch, saved = api.documents()
    assert (batch["step"], batch["totalSteps"], batch["loss"]) == (7, 70, 1.25)
    assert saved["lastCheckpointStep"] == 7


def test_the_helper_imports_nothing_but_the_standard_library() -> None:
    # One file any image can carry: no torch, pydantic or framework behind `import`.
    code = (
        "import sys, dtjob_trainer.report; "
        "print([m for m in ('torch', 'pydantic', 'transformers', 'lightning', "
        "'pytorch_lightning', 'dtjob_trainer.env') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

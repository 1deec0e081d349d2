"""A Custom model whose factory fails ends the job InvalidSpec with the trainer's own
message, read from the real container's termination message (the example itself trains to
Succeeded in test_training with every other examples/cpu job)."""

from __future__ import annotations

from helpers.realnode import E2E, watch_job


def test_a_failing_factory_ends_the_job_invalid_spec_with_its_message(
    e2e: E2E, e2e_namespace: str
) -> None:
    ns = e2e_namespace
    job = e2e.apply_example(
        "custom-model", ns, trainer__model__kwargs={"vocab": 64, "width": 64, "depth": "two"}
    )
    done = watch_job(e2e, ns, job["metadata"]["name"], timeout=600)
    status = done["status"]
    assert status["phase"] == "Failed" and status["reason"] == "InvalidSpec", status
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    # range("two") in the factory: its TypeError, named by the field, reaches the status.
    assert "trainer.model.factory: tiny_lm:build raised TypeError" in failed["message"], failed
    assert status.get("restarts", 0) == 0

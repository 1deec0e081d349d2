"""submit sets spec.managedBy where the job's LocalQueue leads to MultiKueue (as Kueue's
own webhooks do for its job kinds), and leaves every other manifest as written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtjob_client.multikueue import with_managed_by

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def kueue(check_controller: str | None) -> Any:
    """Kueue's objects: LocalQueue "far" of namespace "ns" -> ClusterQueue "cq" -> check."""
    objects: dict[tuple[str | None, str, str], Mapping[str, Any]] = {
        ("ns", "localqueues", "far"): {"spec": {"clusterQueue": "cq"}},
        (None, "clusterqueues", "cq"): {"spec": {"admissionChecksStrategy": {
            "admissionChecks": [{"name": "prov"}, {"name": "dispatch"}]}}},
        (None, "admissionchecks", "prov"): {"spec": {"controllerName": "other.io/prov"}},
    }  # fmt: skip
    if check_controller:
        objects[(None, "admissionchecks", "dispatch")] = {
            "spec": {"controllerName": check_controller}
        }
    return lambda ns, plural, name: objects.get((ns, plural, name))


def manifest(queue: str | None, **spec: Any) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"metadata": {"name": "j", "labels": labels}, "spec": {"roles": {}, **spec}}


def test_a_job_for_a_multikueue_queue_gets_managed_by() -> None:
    out = with_managed_by(manifest("far"), kueue(MULTIKUEUE), "ns")
    assert out["spec"]["managedBy"] == MULTIKUEUE


def test_other_manifests_go_as_written() -> None:
    assert "managedBy" not in with_managed_by(manifest("far"), kueue("other.io/x"), "ns")["spec"]
    assert "managedBy" not in with_managed_by(manifest(None), kueue(MULTIKUEUE), "ns")["spec"]
    assert "managedBy" not in with_managed_by(manifest("nope"), kueue(MULTIKUEUE), "ns")["spec"]
    own = manifest("far", managedBy="dtjob.io/operator")
    assert with_managed_by(own, kueue(MULTIKUEUE), "ns") == own  # the user's choice stands


def test_why_on_the_manager_names_the_worker_or_why_there_is_none() -> None:
    from dtjob_client.multikueue import where_note

    job = {"spec": {"managedBy": MULTIKUEUE}}
    assert where_note({"spec": {}}, []) is None  # run here: nothing to say
    assert "no Workload yet" in str(where_note(job, []))
    waiting = {"status": {"admissionChecks": [
        {"name": "dispatch", "state": "Pending", "message": "no worker has room"}]}}  # fmt: skip
    assert "dispatch Pending: no worker has room" in str(where_note(job, [waiting]))
    dispatched = {"status": {"clusterName": "east"}}
    assert "dispatched it to cluster east" in str(where_note(job, [dispatched]))

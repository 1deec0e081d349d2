"""The Kueue adapter acts as Kueue's own job integrations do (jobframework's reconciler): an
admin's deactivation of a Workload stops the job and stays; a Workload deleted under a
running gang stops that gang before anyone else can hold its GPUs; a job taken out of
Kueue (its queue label removed) gives the Workload's quota back; one eviction counts once
however long the pods take to go; and a suspended job holds its quota until its pods are
gone. Pods are held Terminating with KWOK's slow delete (hack/kwok/pod-delete-slow.yaml),
as a real trainer's are while it checkpoints on SIGTERM: KWOK's fast delete strips every
finalizer, so a finalizer of the test's own would not hold them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from integration.kueue.test_kueue_jobs import (
    operator,  # noqa: F401 (its fixture, for this module)
    priority_class,
    queued_job,
    team_queue,
)
from integration.kueue.test_kueue_runs import condition, custom
from kubernetes import client

from dtjob_api.status import KUEUE_ADMITTED_MESSAGE
from dtjob_operator.kueue.workload import QUEUE_LABEL
from helpers.jobs import JOB_LABEL, create_job, job_pods, patch_job, status, wait_phase
from helpers.jobs import wait_pods_running as running
from helpers.kube import create_namespace, unique, wait_for
from helpers.kueue import GROUP, VERSION, Kueue
from helpers.sampler import Sampler

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
DELETE_AFTER = "dtjob.io/kwok-delete-after"  # a deleted pod stays Terminating this long
HOLD_SECONDS = 12  # several of the operator's passes (resync_seconds 10, plus pod events)


def workload(cluster: Any, ns: str, job: str) -> dict[str, Any] | None:
    """The job's Workload (the operator labels it with the job's name), if there is one."""
    items = custom(cluster).list_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads", label_selector=f"{JOB_LABEL}={job}"
    )["items"]
    return items[0] if items else None


def is_true(wl: dict[str, Any] | None, type_: str) -> bool:
    return wl is not None and (condition(wl, type_) or {}).get("status") == "True"


def story(cluster: Any, ns: str, *jobs: str) -> str:
    """Each job's phase and its Workload's spec.active and conditions (a failure says them)."""
    told = []
    for job in jobs:
        wl = workload(cluster, ns, job) or {}
        said = [(c["type"], c["status"], c["reason"])
                for c in (wl.get("status") or {}).get("conditions") or []]  # fmt: skip
        phase = status(cluster.api, ns, job).get("phase")
        told.append(f"{job} {phase}, Workload active={wl.get('spec', {}).get('active')} {said}")
    return "; ".join(told)


def wait_pending(cluster: Any, ns: str, job: str) -> None:
    """Until Kueue has looked at the job's Workload and found no room for it."""
    wait_for(lambda: (condition(workload(cluster, ns, job) or {}, "QuotaReserved") or {}).get(
        "status") == "False", 60, what=f"{job}'s Workload pending in Kueue",
        explain=lambda: story(cluster, ns, job))  # fmt: skip


def patch_workload(cluster: Any, ns: str, name: str, patch: dict[str, Any]) -> None:
    custom(cluster).patch_namespaced_custom_object(GROUP, VERSION, ns, "workloads", name, patch)


def all_pods(core: client.CoreV1Api, ns: str, job: str) -> list[client.V1Pod]:
    """Every pod of the job, Terminating ones included."""
    return core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job}").items  # type: ignore[no-any-return]


def hold_on_delete(core: client.CoreV1Api, ns: str, pods: list[client.V1Pod]) -> None:
    """Once deleted, these pods stay Terminating until release() (or ten minutes)."""
    for pod in pods:
        patch = {"metadata": {"annotations": {DELETE_AFTER: "600s"}}}
        core.patch_namespaced_pod(pod.metadata.name, ns, patch)


def release(core: client.CoreV1Api, ns: str, job: str) -> None:
    """The held pods finish terminating: gone at once, as a kubelet confirms an exit."""
    for pod in all_pods(core, ns, job):
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    wait_for(lambda: not all_pods(core, ns, job), 60, what=f"the pods of {job} gone")


def wait_terminating(core: client.CoreV1Api, ns: str, job: str) -> None:
    def check() -> bool:
        pods = all_pods(core, ns, job)
        return bool(pods) and all(p.metadata.deletion_timestamp for p in pods)

    def explain() -> str:
        return f"job status {status(core.api_client, ns, job)}"

    wait_for(check, 60, what=f"the pods of {job} Terminating", explain=explain)


def test_an_admins_deactivation_of_a_running_jobs_workload_is_respected(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kw")
    team_queue(cluster, ns, gpus=1)
    name = unique("stopped")
    create_job(cluster.api, ns, queued_job(name, 1, 1))
    first = {p.metadata.uid for p in running(cluster.core, ns, name, 1)}
    wait_phase(cluster.api, ns, name, "Running")
    wl_name = workload(cluster, ns, name)["metadata"]["name"]  # type: ignore[index]

    def stopped() -> dict[str, Any] | None:
        """The job's status once its pods are gone and it is Suspended; fails at once if the
        Workload is active again (no one but the admin may undo the admin's word)."""
        wl = workload(cluster, ns, name)
        assert wl is not None and wl["spec"].get("active") is False, (
            f"the Workload was reactivated: {story(cluster, ns, name)}")  # fmt: skip
        st = status(cluster.api, ns, name)
        gone = not all_pods(cluster.core, ns, name)
        return st if gone and st.get("phase") == "Suspended" else None

    patch_workload(cluster, ns, wl_name, {"spec": {"active": False}})  # kueuectl stop workload
    st = wait_for(stopped, 60, what="the pods gone and the job Suspended",
                  explain=lambda: story(cluster, ns, name))  # fmt: skip
    suspended = next(c for c in st["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "True" and suspended["reason"] == "Deactivated", suspended
    assert "deactivated" in suspended["message"].lower(), suspended
    deadline = time.monotonic() + 15  # the operator's passes leave the admin's word alone
    while time.monotonic() < deadline:
        assert stopped(), f"the job started again: {story(cluster, ns, name)}"
        time.sleep(0.5)

    patch_workload(cluster, ns, wl_name, {"spec": {"active": True}})  # kueuectl resume workload
    again = {p.metadata.uid for p in running(cluster.core, ns, name, 1, timeout=60)}
    assert not again & first
    wait_phase(cluster.api, ns, name, "Running")
    cluster.core.delete_namespace(ns)


class BothLive(Sampler):
    """Every moment at which jobs `a` and `b` both had a live pod: one that has not ended
    and was not told to stop. A Terminating pod counts as stopped: Kueue frees a deleted
    Workload's quota at once, so a gang started then can always meet the old gang's pods
    while they checkpoint (Kueue's own Job integration too); what the operator owes is to
    stop the old gang at once, before a new one can start."""

    def __init__(self, core: client.CoreV1Api, ns: str, a: str, b: str) -> None:
        super().__init__()
        self.core, self.ns, self.jobs = core, ns, (a, b)
        self.seen: list[str] = []

    def sample(self) -> None:
        selector = f"{JOB_LABEL} in ({','.join(self.jobs)})"
        pods = self.core.list_namespaced_pod(self.ns, label_selector=selector).items
        live = [p for p in pods if p.status.phase not in ("Succeeded", "Failed")
                and p.metadata.deletion_timestamp is None]  # fmt: skip
        if {p.metadata.labels[JOB_LABEL] for p in live} == set(self.jobs):
            held = [(p.metadata.name, p.status.phase) for p in live]
            self.seen.append(f"{time.strftime('%X')} {held}")


def test_a_workload_deleted_under_a_running_job_never_lets_two_gangs_hold_its_gpus(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kg")
    team_queue(cluster, ns, gpus=1)
    a, b = unique("a"), unique("b")
    create_job(cluster.api, ns, queued_job(a, 1, 1))
    (pod,) = running(cluster.core, ns, a, 1)
    wait_phase(cluster.api, ns, a, "Running")
    with BothLive(cluster.core, ns, a, b) as both:
        create_job(cluster.api, ns, queued_job(b, 1, 1))
        wait_pending(cluster, ns, b)
        wl_name = workload(cluster, ns, a)["metadata"]["name"]  # type: ignore[index]
        patch_workload(cluster, ns, wl_name, {"metadata": {"finalizers": None}})
        custom(cluster).delete_namespaced_custom_object(GROUP, VERSION, ns, "workloads", wl_name)
        wait_for(
            lambda: both.seen or pod.metadata.uid not in {
                p.metadata.uid for p in all_pods(cluster.core, ns, a)},
            60, what=f"A's running pod {pod.metadata.name} deleted",
            explain=lambda: story(cluster, ns, a, b),
        )  # fmt: skip
        assert not both.seen, f"A and B both had live pods: {both.seen[:3]}"

        def settled() -> bool:
            said = {status(cluster.api, ns, j).get("phase", "") for j in (a, b)}
            # The loser waits: B Queued, or A Suspended (AdmissionWithdrawn) until admitted.
            return said in ({"Queued", "Running"}, {"Suspended", "Running"})

        wait_for(settled, 60, what="one Running, the other waiting",
                 explain=lambda: story(cluster, ns, a, b))  # fmt: skip
    assert not both.seen, f"A and B both had live pods: {both.seen[:3]}"
    winner = a if status(cluster.api, ns, a)["phase"] == "Running" else b
    assert len(job_pods(cluster.core, ns, winner)) == 1
    # A that lost to B may still have its pod Terminating (checkpointing, for a trainer):
    # it is gone in the end, and nothing of A starts meanwhile (both.seen stayed empty).
    loser = b if winner == a else a
    wait_for(lambda: not all_pods(cluster.core, ns, loser), 60, what=f"the pods of {loser} gone",
             explain=lambda: story(cluster, ns, a, b))  # fmt: skip
    cluster.core.delete_namespace(ns)


def test_removing_the_queue_label_of_an_admitted_job_gives_its_workload_quota_back(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kl")
    team_queue(cluster, ns, gpus=1)  # the fake nodes have 32 GPUs: both jobs fit the cluster
    a, b = unique("a"), unique("b")
    create_job(cluster.api, ns, queued_job(a, 1, 1))
    running(cluster.core, ns, a, 1)
    wait_phase(cluster.api, ns, a, "Running")
    old = workload(cluster, ns, a)
    assert old is not None and is_true(old, "Admitted"), old
    patch_job(cluster.api, ns, a, {"metadata": {"labels": {QUEUE_LABEL: None}}})

    def old_done() -> bool:
        now = workload(cluster, ns, a)
        return now is None or now["metadata"]["uid"] != old["metadata"]["uid"] or is_true(
            now, "Finished")  # fmt: skip

    wait_for(old_done, 60, what="A's Workload Finished or gone",
             explain=lambda: story(cluster, ns, a))  # fmt: skip
    create_job(cluster.api, ns, queued_job(b, 1, 1))
    wait_for(
        lambda: is_true(workload(cluster, ns, b), "Admitted"), 60,
        what="B's Workload Admitted by Kueue", explain=lambda: story(cluster, ns, a, b),
    )  # fmt: skip
    running(cluster.core, ns, b, 1)

    def builtin_running() -> dict[str, Any] | None:
        st = status(cluster.api, ns, a)
        admitted = next((c for c in st.get("conditions", []) if c["type"] == "Admitted"), {})
        ok = st.get("phase") == "Running" and admitted.get("status") == "True"
        return st if ok and not admitted["message"].startswith(KUEUE_ADMITTED_MESSAGE) else None

    wait_for(builtin_running, 60, what="A Running under the built-in admission",
             explain=lambda: str(status(cluster.api, ns, a)))  # fmt: skip
    assert len(job_pods(cluster.core, ns, a)) == 1
    cluster.core.delete_namespace(ns)


def test_one_kueue_eviction_counts_as_one_preemption_and_one_event(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kc")
    cq = team_queue(cluster, ns, gpus=1)
    custom(cluster).patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {
        "spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})  # fmt: skip
    priority_class(cluster, "kueue-test-low", 100)
    priority_class(cluster, "kueue-test-high", 1000)
    low, high = unique("low"), unique("high")
    job = queued_job(low, 1, 1)
    job["spec"]["priorityClassName"] = "kueue-test-low"
    create_job(cluster.api, ns, job)
    hold_on_delete(cluster.core, ns, running(cluster.core, ns, low, 1))
    wait_phase(cluster.api, ns, low, "Running")

    job = queued_job(high, 1, 1)
    job["spec"]["priorityClassName"] = "kueue-test-high"
    create_job(cluster.api, ns, job)
    stopped = wait_phase(cluster.api, ns, low, "Suspended", timeout=60)
    assert {c["type"]: c["reason"] for c in stopped["conditions"]}["Suspended"] == "Preempted"
    wait_terminating(cluster.core, ns, low)
    time.sleep(HOLD_SECONDS)  # the victim checkpoints; the operator passes over it meanwhile
    release(cluster.core, ns, low)
    running(cluster.core, ns, high, 1, timeout=60)
    st = status(cluster.api, ns, low)
    events = [e for e in cluster.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={low}").items
        if e.reason == "Preempted" and e.type == "Warning"]  # fmt: skip
    assert st["admission"]["preemptions"] == 1, st["admission"]
    assert len(events) == 1, [(e.metadata.creation_timestamp, e.message) for e in events]
    cluster.core.delete_namespace(ns)


def test_suspending_a_kueue_job_keeps_its_quota_until_its_pods_are_gone(
    cluster: Any, kueue: Kueue
) -> None:
    ns = create_namespace(cluster.core, "kh")
    team_queue(cluster, ns, gpus=1)
    a, b = unique("a"), unique("b")
    create_job(cluster.api, ns, queued_job(a, 1, 1))
    hold_on_delete(cluster.core, ns, running(cluster.core, ns, a, 1))
    wait_phase(cluster.api, ns, a, "Running")
    create_job(cluster.api, ns, queued_job(b, 1, 1))
    wait_pending(cluster, ns, b)
    patch_job(cluster.api, ns, a, {"spec": {"suspend": True}})
    wait_terminating(cluster.core, ns, a)
    deadline = time.monotonic() + HOLD_SECONDS  # A's trainer still holds its GPU
    while time.monotonic() < deadline:
        wl = workload(cluster, ns, b)
        assert not is_true(wl, "QuotaReserved") and not is_true(wl, "Admitted"), (
            f"B admitted while A's pod terminates: {story(cluster, ns, a, b)}")  # fmt: skip
        assert not all_pods(cluster.core, ns, b)
        time.sleep(0.5)
    assert all_pods(cluster.core, ns, a), "A's pod went before the end of the hold"
    release(cluster.core, ns, a)
    running(cluster.core, ns, b, 1, timeout=60)
    assert is_true(workload(cluster, ns, b), "Admitted")
    wait_phase(cluster.api, ns, a, "Suspended")
    cluster.core.delete_namespace(ns)


UNPULLABLE = "registry.invalid/unpullable:1"  # hack/kwok/pod-image-pull-backoff.yaml


def test_a_gang_that_never_gets_ready_ends_deactivated_by_waitforpodsready_not_cycling(
    cluster: Any, kueue: Kueue
) -> None:
    """Kueue's waitForPodsReady evicts a gang not ready within its timeout, requeues it
    `backoffLimitCount` times, then deactivates its Workload: the job stops for good and
    says why (Kueue's reason in its Suspended condition), instead of cycling forever."""
    from integration.kueue.conftest import PODS_READY_TIMEOUT_SECONDS, REQUEUE_LIMIT

    ns = create_namespace(cluster.core, "kr")
    team_queue(cluster, ns, gpus=1)
    name = unique("stuck")
    job = queued_job(name, 1, 1)
    job["spec"]["trainer"] = {"image": UNPULLABLE, "command": ["train"]}
    create_job(cluster.api, ns, job)
    limit = (REQUEUE_LIMIT + 1) * (PODS_READY_TIMEOUT_SECONDS + 10) + 60

    def deactivated() -> dict[str, Any] | None:
        st = status(cluster.api, ns, name)
        said = next((c for c in st.get("conditions") or [] if c["type"] == "Suspended"), {})
        return (
            st if said.get("reason") == "Deactivated" and st.get("phase") == "Suspended" else None
        )

    def explain() -> str:
        return story(cluster, ns, name)

    st = wait_for(deactivated, limit, what="the job Suspended, Deactivated", explain=explain)
    suspended = next(c for c in st["conditions"] if c["type"] == "Suspended")
    # Kueue's cause: its Deactivated eviction's message (0.17: "... re-queuing retries"), or
    # the evictions that led there (schedulingStats: all that 0.19 keeps).
    said = suspended["message"]
    assert "re-queuing retries" in said or "after evictions PodsReadyTimeout" in said, said
    assert "kueuectl resume workload" in suspended["message"], suspended
    wait_for(lambda: not all_pods(cluster.core, ns, name), 60, what="its pods gone")
    deadline = time.monotonic() + HOLD_SECONDS  # stopped for good: nothing starts again
    while time.monotonic() < deadline:
        wl = workload(cluster, ns, name)
        assert wl is not None and wl["spec"].get("active") is False, explain()
        assert not all_pods(cluster.core, ns, name), explain()
        assert status(cluster.api, ns, name)["phase"] == "Suspended", explain()
        time.sleep(1)
    cluster.core.delete_namespace(ns)

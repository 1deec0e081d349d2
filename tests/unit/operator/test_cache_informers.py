"""What the caches' informers are built to watch and wake (cache_informers.py): with every
namespace watched, no pod is held twice and the admission still sees them all; with some,
the capacity cache keeps every pod; the namespaces cache says which are being deleted."""

from __future__ import annotations

from typing import Any

from unit.operator.caching import pod, watch

from dtjob_operator.caches import Caches
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.settings import OperatorSettings


class AnyCall:
    """Stands for the API's list calls: _build only names them."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def built(namespaces: list[str], on_capacity: Any = lambda: None) -> Caches:
    api = AnyCall()
    settings = OperatorSettings(namespaces=namespaces)
    caches = Caches(api, settings, lambda key: None, on_capacity)  # type: ignore[arg-type]
    caches._build()
    for informer in caches.informers:
        informer.synced.set()
    return caches


def running(name: str, rv: str, phase: str = "Running", job: str | None = "j") -> dict[str, Any]:
    obj = pod(name, rv)
    if job is None:
        obj["metadata"]["labels"] = {}
    obj["status"] = {"phase": phase}
    return obj


def test_watching_all_namespaces_no_pod_is_cached_twice_and_the_admission_sees_them_all() -> None:
    freed: list[str] = []
    caches = built([], on_capacity=lambda: freed.append("pass"))
    assert caches.unfinished_pods is not None
    assert caches.unfinished_pods.label_selector == f"!{LABEL_JOB_NAME}"
    watch(caches.unfinished_pods, "ADDED", running("other", "1", job=None))
    freed.clear()
    (job_pods,) = caches.job_pods
    watch(job_pods, "ADDED", running("j-worker-0", "2"))
    watch(job_pods, "ADDED", running("j-worker-1", "3", phase="Succeeded"))
    names = {p["metadata"]["name"] for p in caches.list_all_pods()}
    assert names == {"other", "j-worker-0"}  # the finished pod holds no room
    assert freed == ["pass"]  # ... and its finishing asked for an admission pass
    watch(job_pods, "MODIFIED", running("j-worker-0", "4", phase="Failed"))
    assert {p["metadata"]["name"] for p in caches.list_all_pods()} == {"other"}
    assert len(freed) == 2


def test_watching_some_namespaces_the_capacity_cache_keeps_every_pod() -> None:
    caches = built(["team-a"])
    assert caches.unfinished_pods is not None
    assert caches.unfinished_pods.label_selector is None
    # A job pod of another installation's namespace holds room this one must count.
    watch(caches.unfinished_pods, "ADDED", running("elsewhere-worker-0", "1"))
    assert {p["metadata"]["name"] for p in caches.list_all_pods()} == {"elsewhere-worker-0"}


def test_a_namespace_is_terminating_once_the_cache_sees_it_deleted() -> None:
    caches = built([])
    assert caches.namespaces is not None
    assert not caches.namespace_terminating("t-1")  # not (yet) in the cache: go on
    meta = {"name": "t-1", "uid": "u", "resourceVersion": "1", "labels": {"x": "y"}}
    watch(caches.namespaces, "ADDED", {"metadata": meta, "status": {"phase": "Active"}})
    assert not caches.namespace_terminating("t-1")
    assert caches.namespaces.get("", "t-1") == {
        "metadata": {"name": "t-1", "uid": "u", "resourceVersion": "1"},
        "status": {"phase": "Active"},
    }
    deleted = {**meta, "resourceVersion": "2", "deletionTimestamp": "2026-11-29T18:00:00Z"}
    watch(caches.namespaces, "MODIFIED", {"metadata": deleted, "status": {"phase": "Terminating"}})
    assert caches.namespace_terminating("t-1")

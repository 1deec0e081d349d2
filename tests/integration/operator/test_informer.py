"""The informer (watch-backed cache) against the real API server: server-side selection,
the index by job, every change seen, a resourceVersion too old answered by a new list, and
a quiet watch resumed without one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dtjob_operator import kubeconfig
from dtjob_operator.api_client import GuardedApiClient
from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.informer import Informer, lister
from dtjob_operator.rest import CORE
from helpers.kube import wait_for

pytestmark = [pytest.mark.integration]


def pod(name: str, job: str | None) -> dict[str, Any]:
    labels = {LABEL_JOB_NAME: job} if job else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture
def events() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def informer(cluster, namespace, events) -> Iterator[Informer]:  # type: ignore[no-untyped-def]
    http = GuardedApiClient(kubeconfig.from_kubeconfig([cluster.kubeconfig]), (5.0, 30.0))
    inf = Informer(
        "test-pods",
        lister(http, CORE, "pods"),
        namespace=namespace,
        label_selector=LABEL_JOB_NAME,
        index_label=LABEL_JOB_NAME,
        on_change=lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
        page_size=2,  # the first list takes several pages
        watch_seconds=2,  # the API server ends each watch quickly: resumed, not re-listed
    )
    yield inf
    inf.stop()


def names(objs: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}


def test_the_cache_follows_selected_pods_and_indexes_them_by_job(
    cluster, namespace, informer, events
) -> None:  # type: ignore[no-untyped-def]
    core: client.CoreV1Api = cluster.core
    for i in range(5):  # before the start: found by the paginated first list
        core.create_namespaced_pod(namespace, pod(f"a{i}", "ja"))
    core.create_namespaced_pod(namespace, pod("other", None))
    informer.start()
    assert informer.synced.wait(30)
    assert names(informer.indexed(namespace, "ja")) == {f"a{i}" for i in range(5)}
    # After the start: seen through the watch, across several watches the server ended.
    core.create_namespaced_pod(namespace, pod("b0", "jb"))
    wait_for(lambda: informer.indexed(namespace, "jb"), 30, what="b0 in the cache")
    core.patch_namespaced_pod("a0", namespace, {"metadata": {"labels": {"extra": "x"}}})
    wait_for(
        lambda: (informer.get(namespace, "a0") or {}).get("metadata", {}).get("labels", {})
        .get("extra"),
        30, what="a0's new label",
    )  # fmt: skip
    core.delete_namespaced_pod("a1", namespace, grace_period_seconds=0)
    wait_for(lambda: informer.get(namespace, "a1") is None, 30, what="a1 gone")
    assert "a1" not in names(informer.indexed(namespace, "ja"))
    # Selected on the server: the unlabelled pod never reached the cache or the callback.
    assert informer.get(namespace, "other") is None
    assert all(name != "other" for _, name in events)
    assert ("DELETED", "a1") in events and ("ADDED", "b0") in events
    # No managedFields kept (the default trim).
    assert "managedFields" not in informer.get(namespace, "b0")["metadata"]
    # Quiet watches that the server ended were resumed from their resourceVersion.
    assert informer.lists == 1


def test_a_resource_version_too_old_is_answered_by_a_new_list(cluster, namespace, informer) -> None:  # type: ignore[no-untyped-def]
    cluster.core.create_namespaced_pod(namespace, pod("p", "j"))
    # As after a long disconnection: the watch would resume from a revision the API
    # server compacted away long ago (410 Gone).
    informer._rv = "1"
    informer.start()
    assert informer.synced.wait(30)
    assert names(informer.indexed(namespace, "j")) == {"p"}
    assert informer.lists == 1


def test_relist_lists_again_at_once_and_keeps_the_cache(cluster, namespace, informer) -> None:  # type: ignore[no-untyped-def]
    # After an API server outage the operator asks every cache for a fresh list rather
    # than trusting a watch resumed across the restart: it comes at once (the watch is cut,
    # not waited out) and leaves the cache whole, with no failure counted.
    core: client.CoreV1Api = cluster.core
    core.create_namespaced_pod(namespace, pod("p0", "jr"))
    informer.start()
    wait_for(lambda: informer.synced.is_set() and names(informer.items()) == {"p0"}, 30)
    lists = informer.lists
    informer.relist()
    wait_for(lambda: informer.lists == lists + 1, 10, what="a fresh list")
    core.create_namespaced_pod(namespace, pod("p1", "jr"))
    wait_for(lambda: names(informer.items()) == {"p0", "p1"}, 30, what="the watch resumed")

"""The ConfigMap cache keeps the loss-history ConfigMap's metadata (the planner sees the
child and does not create it again) but not its data, and a history write wakes no
reconcile; the other ConfigMaps are kept whole."""

from __future__ import annotations

import json
import sys
from typing import Any

from unit.operator.builders import a_job

from dtjob_operator.builders.configmaps import build_history_config_map, build_progress_config_map
from dtjob_operator.caches import Caches
from dtjob_operator.constants import HISTORY_KEY
from dtjob_operator.informer import Informer
from dtjob_operator.settings import OperatorSettings


class Api:
    """The API client, never called: the test feeds the watch itself."""

    api_client = None


def full_history() -> dict[str, Any]:
    """A history ConfigMap as the API server sends it after 512 rows were written."""
    cm = build_history_config_map(a_job().with_workers(1).job())
    rows = [[s, 1.0 / s, None, 1234.5, 0.001, 1.7e9 + s] for s in range(1, 513)]
    document = {"columns": json.loads(cm["data"][HISTORY_KEY])["columns"], "rows": rows}
    cm["data"][HISTORY_KEY] = json.dumps({**document, "stride": 2})
    cm["metadata"]["resourceVersion"] = "7"
    return cm


def config_map_informer() -> tuple[Informer, list[tuple[str, str]]]:
    woken: list[tuple[str, str]] = []
    caches = Caches(Api(), OperatorSettings(), woken.append, lambda: None)  # type: ignore[arg-type]
    caches._build()
    (informer,) = caches.job_config_maps
    return informer, woken


def test_the_history_config_map_is_cached_without_its_data() -> None:
    informer, _ = config_map_informer()
    history = full_history()
    assert len(history["data"][HISTORY_KEY]) > 30_000  # what 1,000 jobs would hold 1,000 of
    informer._apply({"type": "ADDED", "object": history})
    cached = informer.get("ns", "j-history")
    assert cached is not None and "data" not in cached
    assert cached["metadata"]["ownerReferences"] == history["metadata"]["ownerReferences"]
    assert [c["metadata"]["name"] for c in informer.indexed("ns", "j")] == ["j-history"]
    assert sys.getsizeof(json.dumps(cached)) < 2_000


def test_progress_is_cached_whole() -> None:
    informer, _ = config_map_informer()
    progress = build_progress_config_map(a_job().with_workers(1).job())
    progress["data"]["progress.json"] = '{"step": 3}'
    informer._apply({"type": "ADDED", "object": progress})
    cached = informer.get("ns", "j-progress")
    assert cached is not None and cached["data"] == {"progress.json": '{"step": 3}'}


def test_a_history_write_wakes_no_reconcile_but_its_deletion_does() -> None:
    informer, woken = config_map_informer()
    informer._apply({"type": "ADDED", "object": full_history()})
    assert woken == [("ns", "j")]
    informer._apply({"type": "MODIFIED", "object": full_history()})
    assert woken == [("ns", "j")]  # every 30 s per running job: not a reason to look
    progress = build_progress_config_map(a_job().with_workers(1).job())
    informer._apply({"type": "MODIFIED", "object": progress})
    informer._apply({"type": "DELETED", "object": full_history()})
    assert woken == [("ns", "j")] * 3  # progress changes and a lost child still do


def test_a_new_job_asks_for_an_admission_pass_its_changes_do_not() -> None:
    """A pass as soon as the cache holds a new job admits it before its first reconcile
    has to write that it waits (in a burst: a status write and an Event per job)."""
    asked: list[bool] = []
    caches = Caches(Api(), OperatorSettings(), lambda key: None, lambda: asked.append(True))  # type: ignore[arg-type]
    caches._build()
    (informer,) = caches.jobs
    job = a_job().with_workers(1).obj()
    job["metadata"]["resourceVersion"] = "1"
    informer._apply({"type": "ADDED", "object": job})
    assert asked == [True]
    job["metadata"]["resourceVersion"] = "2"
    informer._apply({"type": "MODIFIED", "object": job})
    assert asked == [True]

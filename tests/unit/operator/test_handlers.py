"""What kopf watches (handlers.register): nothing with the caches on, where the caches'
watches wake the reconciles (a second watch of the jobs cost 44 % of the operator's CPU in a
burst); the jobs, their pods and ConfigMaps, and the quotas with them off. kopf's scanning
of the cluster (a watch of every CRD and namespace) serves only its own watches."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from dtjob_operator import handlers
from dtjob_operator.settings import OperatorSettings


def watched(informers: bool) -> set[str]:
    registry = kopf.OperatorRegistry()
    handlers.register(registry, object(), OperatorSettings(informers=informers))  # type: ignore[arg-type]
    found: set[str] = set()
    for handler in registry._watching.get_all_handlers():
        selector: Any = handler.selector
        found.add(str(selector.any_name))
    return found


@pytest.mark.parametrize(
    ("informers", "expected"),
    [(True, set()), (False, {"distributedtrainingjobs", "pods", "configmaps", "resourcequotas"})],
)
def test_kopf_watches_only_what_no_cache_watches(informers: bool, expected: set[str]) -> None:
    assert watched(informers) == expected
    # Start-up, credentials and the loop's heartbeat are kopf's either way.
    registry = kopf.OperatorRegistry()
    handlers.register(registry, object(), OperatorSettings(informers=informers))  # type: ignore[arg-type]
    assert registry._activities.get_all_handlers()


@pytest.mark.parametrize("informers", [True, False])
def test_kopf_scans_the_cluster_only_for_its_own_watches(informers: bool) -> None:
    kopf_settings = kopf.OperatorSettings()
    handlers.configure_kopf(kopf_settings, OperatorSettings(informers=informers))
    # With the caches no kopf watch needs the CRDs or namespaces it would otherwise watch
    # (ours is 2.3 MB of schema; the watch kept the last one it listed).
    assert kopf_settings.scanning.disabled is informers

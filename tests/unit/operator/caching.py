"""What the caches' tests share: a job's pod and a watch event fed to an informer."""

from __future__ import annotations

from typing import Any

from dtjob_operator.constants import LABEL_JOB_NAME
from dtjob_operator.informer import Informer


def pod(name: str, rv: str, uid: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name, "namespace": "ns", "uid": uid or f"uid-{name}",
            "resourceVersion": rv, "labels": {LABEL_JOB_NAME: "j"},
        },
    }  # fmt: skip


def watch(informer: Informer, kind: str, obj: dict[str, Any]) -> None:
    informer._apply({"type": kind, "object": obj})

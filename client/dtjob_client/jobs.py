"""A job as the SDK hands it out (typed with dtjob_api's models), and manifests in.

Pure: no Kubernetes client here. Parsing is lenient about fields this version does not know
(an operator newer than the client may add status fields): they are dropped, not fatal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dtjob_api import GROUP, KIND, VERSION
from dtjob_api.errors import FieldError
from dtjob_api.goodput import gpus_of
from dtjob_api.spec import DistributedTrainingJobSpec
from dtjob_api.status import DistributedTrainingJobStatus
from dtjob_api.validation import validate_job
from dtjob_client.errors import DtjobError, InvalidJob

API_VERSION = f"{GROUP}/{VERSION}"
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Job:
    """One DistributedTrainingJob: metadata, its spec and its status."""

    name: str
    namespace: str
    uid: str
    created: datetime | None
    """metadata.creationTimestamp."""
    spec: DistributedTrainingJobSpec | None
    """None only when the stored spec does not parse with this version of dtjob_api."""
    status: DistributedTrainingJobStatus
    """The operator's status; the defaults (phase Pending) before it wrote one."""
    raw: Mapping[str, Any]
    """The object as the API server returned it (JSON)."""

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Job:
        """Build from the API server's JSON."""
        meta = obj.get("metadata") or {}
        created = meta.get("creationTimestamp")
        spec = lenient(DistributedTrainingJobSpec, obj.get("spec") or {})
        status = lenient(DistributedTrainingJobStatus, obj.get("status") or {})
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            created=parse_time(created) if isinstance(created, str) else None,
            spec=spec,
            status=status or DistributedTrainingJobStatus(),
            raw=obj,
        )

    @property
    def gpus(self) -> int:
        """GPUs (of any vendor or MIG profile) the whole gang asks for, from the spec."""
        return gpus_of(self.spec) if self.spec is not None else 0


def lenient(model: type[M], data: Mapping[str, Any]) -> M | None:
    """`model.model_validate(data)`, dropping fields the model forbids as unknown (an API
    newer than this client); None when the data is wrong in another way."""
    doc: Any = _copy(data)
    for _ in range(50):  # each round drops the unknown fields pydantic reported
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            extra = [e["loc"] for e in exc.errors() if e["type"] == "extra_forbidden"]
            if not extra:
                return None
            for loc in extra:
                _drop(doc, loc)
    return None


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _drop(doc: Any, loc: tuple[int | str, ...]) -> None:
    node = doc
    for part in loc[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(loc[-1], None)


def parse_time(value: str) -> datetime:
    """An RFC 3339 time as the API server writes it (`2026-01-02T03:04:05Z`)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def load_manifest(
    job: DistributedTrainingJobSpec | Mapping[str, Any] | str | Path, name: str | None = None
) -> dict[str, Any]:
    """A complete manifest from a spec model (with `name`), a manifest dict, or the path of a
    YAML file holding one job. Checked with dtjob_api's validation: InvalidJob names every
    field that is wrong, before anything is sent."""
    if isinstance(job, DistributedTrainingJobSpec):
        if not name:
            raise InvalidJob([FieldError("metadata.name", "required when submitting a spec model")])
        manifest: dict[str, Any] = {"metadata": {"name": name}, "spec": job.to_api()}
    elif isinstance(job, Mapping):
        manifest = _copy(job)
    else:
        manifest = _read_yaml(Path(job))
    manifest.setdefault("apiVersion", API_VERSION)
    manifest.setdefault("kind", KIND)
    if manifest["apiVersion"] != API_VERSION or manifest["kind"] != KIND:
        raise InvalidJob(
            [FieldError("kind", f"expected {KIND} ({API_VERSION}), got {manifest['kind']} "
                    f"({manifest['apiVersion']})")]
        )  # fmt: skip
    meta = manifest.setdefault("metadata", {})
    if name:
        meta["name"] = name
    if not meta.get("name"):
        raise InvalidJob([FieldError("metadata.name", "required")])
    errors = validate_job(manifest.get("spec"), str(meta["name"]))
    if errors:
        raise InvalidJob(errors)
    head: dict[str, Any] = {
        k: manifest[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in manifest
    }
    return {**head, **manifest}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise DtjobError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise DtjobError(f"{path} is not valid YAML: {exc}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise DtjobError(f"{path} must hold exactly one job manifest (found {len(docs)})")
    return docs[0]

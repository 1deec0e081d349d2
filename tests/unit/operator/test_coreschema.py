"""The embedded core/v1 schema: cut from the pinned Kubernetes' OpenAPI document, structural,
and committed (api/dtjob_api/core_v1.json) exactly as the generator writes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dtjob_api import coreschema

REPO = Path(__file__).resolve().parents[3]
META = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _kube_version() -> str:
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        if line.startswith("KUBE_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("hack/versions.env has no KUBE_VERSION")


def _module_cache() -> Path | None:
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go is None:
        return None
    out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False)
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def test_committed_data_matches_the_pinned_kubernetes() -> None:
    cache = _module_cache()
    source = (
        cache / f"k8s.io/kubernetes@{_kube_version()}" / coreschema.SOURCE_PATH if cache else None
    )
    if source is None or not source.exists():
        pytest.skip("k8s.io/kubernetes is not in the Go module cache (run `make binaries`)")
    expected = coreschema.render(coreschema.extract(json.loads(source.read_text())))
    assert coreschema.DATA_FILE.read_text() == expected, (
        "core_v1.json drifted from the pinned Kubernetes: "
        f"python -m dtjob_api.coreschema {source} && make crds"
    )


def _ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/io.k8s.api.core.v1.{name}"}]}


def _doc() -> dict[str, Any]:
    """A tiny OpenAPI v3 document in core/v1's shape."""
    quantity = {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"}
    schemas: dict[str, Any] = {
        "io.k8s.api.core.v1.PodSpec": {
            "description": "PodSpec.",
            "type": "object",
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "items": {**_ref("Container"), "default": {}},
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-patch-strategy": "merge",
                },
                "ephemeralContainers": {"type": "array", "items": _ref("Container")},
                "restartPolicy": {"type": "string", "description": "One of Always, ..."},
                "affinity": {**_ref("Affinity"), "description": "why"},
                "tolerations": {"type": "array", "items": _ref("Toleration")},
                "volumes": {"type": "array", "items": _ref("Volume")},
            },
        },
        "io.k8s.api.core.v1.Container": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "default": ""},
                "ports": {
                    "type": "array",
                    "items": _ref("ContainerPort"),
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                },
                "limits": {"type": "object", "additionalProperties": quantity},
                "imagePullPolicy": {"type": "string"},
                "terminationMessagePolicy": {"type": "string"},
                "restartPolicy": {"type": "string"},
            },
        },
        "io.k8s.api.core.v1.ContainerPort": {
            "type": "object",
            "required": ["containerPort"],
            "properties": {
                "containerPort": {"type": "integer", "format": "int32", "default": 0},
                "protocol": {"type": "string", "default": "TCP"},
            },
        },
        "io.k8s.api.core.v1.Affinity": {"type": "object", "properties": {"x": {"type": "string"}}},
        "io.k8s.api.core.v1.Toleration": {
            "type": "object",
            "properties": {"operator": {"type": "string"}, "effect": {"type": "string"}},
        },
        "io.k8s.api.core.v1.Volume": {
            "type": "object",
            "properties": {"ephemeral": _ref("PersistentVolumeClaimTemplate")},
        },
        "io.k8s.api.core.v1.PersistentVolumeClaimTemplate": {
            "type": "object",
            "properties": {"metadata": {"allOf": [{"$ref": META}]}},
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
            "type": "object",
            "properties": {"managedFields": {"type": "array"}},
        },
        "io.k8s.apimachinery.pkg.api.resource.Quantity": {
            "oneOf": [{"type": "string"}, {"type": "number"}]
        },
        "io.k8s.api.core.v1.VolumeMount": {"type": "object"},
        "io.k8s.api.core.v1.EnvVar": {"type": "object"},
    }
    for kind in ("NodeSelectorRequirement", "LabelSelectorRequirement", "TopologySpreadConstraint"):
        schemas["io.k8s.api.core.v1.PodSpec"]["properties"][kind] = _ref(kind)
        schemas[f"io.k8s.api.core.v1.{kind}"] = {
            "type": "object",
            "properties": {"operator": {"type": "string"}, "whenUnsatisfiable": {"type": "string"}},
        }
    schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["dnsPolicy"] = {"type": "string"}
    schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["preemptionPolicy"] = {"type": "string"}
    schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["sc"] = _ref("SeccompProfile")
    schemas["io.k8s.api.core.v1.SeccompProfile"] = {
        "type": "object",
        "properties": {"type": {"type": "string"}},
    }
    schemas["io.k8s.api.core.v1.VolumeMount"] = {
        "type": "object",
        "properties": {"mountPropagation": {"type": "string"}},
    }
    return {"components": {"schemas": schemas}}


def test_extract_makes_a_structural_subset() -> None:
    data = coreschema.extract(_doc())["schemas"]
    pod = data["PodSpec"]
    assert "description" not in json.dumps(data)
    assert "x-kubernetes-patch-strategy" not in json.dumps(data)
    assert "ephemeralContainers" not in pod["properties"]
    assert "required" not in pod  # containers: the operator adds the trainer
    assert pod["properties"]["containers"]["items"] == {"$ref": "Container"}
    assert pod["properties"]["restartPolicy"]["enum"] == ["", "Always", "OnFailure", "Never"]
    container = data["Container"]["properties"]
    assert container["name"] == {"type": "string"}  # required: no default
    assert container["limits"]["additionalProperties"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    port = data["ContainerPort"]["properties"]
    assert port["protocol"]["default"] == "TCP" and "default" not in port["containerPort"]
    assert data["ObjectMeta"]["properties"].keys() == {"annotations", "labels"}
    assert data["Toleration"]["properties"]["operator"]["enum"] == ["", "Exists", "Equal"]


def test_enums_must_name_fields_that_exist() -> None:
    doc = _doc()
    del doc["components"]["schemas"]["io.k8s.api.core.v1.Toleration"]["properties"]["effect"]
    with pytest.raises(ValueError, match=r"Toleration\.effect"):
        coreschema.extract(doc)


def test_inline_resolves_every_ref() -> None:
    pod = coreschema.inline("PodSpec")
    assert "$ref" not in json.dumps(pod)
    env = pod["properties"]["containers"]["items"]["properties"]["env"]["items"]
    assert env == coreschema.inline("EnvVar")

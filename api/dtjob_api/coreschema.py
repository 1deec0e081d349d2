"""The real core/v1 schema of the pod template, embedded in the CRD.

The role pod template is a Kubernetes PodTemplateSpec. Its schema is not written by hand:
it is cut out of the OpenAPI v3 document of the pinned Kubernetes (k8s.io/kubernetes
`api/openapi-spec/v3/api__v1_openapi.json`, the same document kube-apiserver serves at
/openapi/v3/api/v1) and committed as `core_v1.json`, which the CRD generator reads. So the
API server checks types, enum values and unknown fields of the template, and nesting is
bounded by the schema (a free-form object would accept anything, however deep).

What `extract` keeps and changes, so that the result is a structural CRD schema:
- the types reachable from PodSpec (plus the short fields' types), `$ref`s kept by short
  name (`inline` resolves them when the CRD is generated; core/v1 has no cycles there);
- descriptions and numeric formats dropped (the CRD stays within its budget, test_crd.py;
  `kubectl explain pod.spec` has them), as are the strategic-merge-patch
  and union markers a CRD does not take;
- IntOrString and Quantity (`oneOf` integer/number and string) become
  `x-kubernetes-int-or-string`;
- enums (ENUMS) for the fields whose values core/v1 names only in prose;
- defaults dropped (the pods get them from the API server anyway), except on the keys of
  map-type lists, which a CRD requires to be required or defaulted;
- ObjectMeta inside the template (ephemeral volume claims) reduced to labels and
  annotations; `ephemeralContainers` left out (it cannot be set when a pod is created),
  so are the volume sources whose in-tree plugins 1.33 no longer runs (_DROPPED_PROPERTIES),
  `containers` optional (the operator adds the trainer).

`python -m dtjob_api.coreschema SOURCE.json` rewrites core_v1.json; a unit test
fails when the committed file no longer matches what the pinned source gives.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("core_v1.json")
SOURCE_PATH = "api/openapi-spec/v3/api__v1_openapi.json"
_REF_PREFIX = "#/components/schemas/"
_CORE = "io.k8s.api.core.v1."
# The types the API models refer to by name (spec.py's core_type markers).
ROOTS = ("PodSpec", "Toleration", "Affinity", "Volume", "VolumeMount", "EnvVar")
_INT_OR_STRING = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
}
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_DROPPED_PROPERTIES = {
    "PodSpec": {"ephemeralContainers"},
    # In-tree volume plugins that 1.33 kubelets no longer have (removed: cephfs and rbd in
    # 1.31, with no CSI migration; gitRepo: off by default): a pod using them cannot start,
    # so the template refuses them at apply; and the CRD must stay within its budget
    # (test_crd.py).
    "Volume": {"cephfs", "flocker", "gitRepo", "glusterfs", "photonPersistentDisk", "quobyte",
               "rbd", "scaleIO", "storageos"},
}  # fmt: skip
# The operator adds the trainer container, so a template may have none of its own.
_OPTIONAL = {"PodSpec": {"containers"}}
# String formats the API server checks in a CRD. Numeric ones (int32, int64, double) are
# dropped: they check nothing there and cost 5 KB of a CRD that must stay under 256 KiB.
_FORMATS = {"byte", "date-time"}
_KEPT_KEYS = {
    "type", "format", "enum", "required", "properties", "items", "additionalProperties",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
}  # fmt: skip
# The document carries no `enum` keywords: core/v1 names the values it accepts in the
# descriptions only. These are the ones a typo in a training job's template is likely to hit;
# "" where the core API reads an empty value as the default.
ENUMS: dict[str, list[str]] = {
    "Toleration.operator": ["", "Exists", "Equal"],
    "Toleration.effect": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"],
    "NodeSelectorRequirement.operator": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
    "LabelSelectorRequirement.operator": ["In", "NotIn", "Exists", "DoesNotExist"],
    "TopologySpreadConstraint.whenUnsatisfiable": ["DoNotSchedule", "ScheduleAnyway"],
    "Container.imagePullPolicy": ["", "Always", "Never", "IfNotPresent"],
    "Container.terminationMessagePolicy": ["", "File", "FallbackToLogsOnError"],
    "Container.restartPolicy": ["Always"],
    "ContainerPort.protocol": ["TCP", "UDP", "SCTP"],
    "PodSpec.dnsPolicy": ["", "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    "PodSpec.preemptionPolicy": ["", "PreemptLowerPriority", "Never"],
    "PodSpec.restartPolicy": ["", "Always", "OnFailure", "Never"],
    "SeccompProfile.type": ["Localhost", "RuntimeDefault", "Unconfined"],
    "VolumeMount.mountPropagation": ["", "None", "HostToContainer", "Bidirectional"],
}


def _short(name: str) -> str:
    """`io.k8s.api.core.v1.PodSpec` -> `PodSpec`; other groups keep a distinct name."""
    if name.startswith(_CORE):
        return name[len(_CORE) :]
    return name.rsplit(".", 1)[-1]


def _ref_name(node: dict[str, Any]) -> str | None:
    """The referenced type of `{$ref}` or `{allOf: [{$ref}]}`, else None."""
    if "$ref" in node:
        return str(node["$ref"]).removeprefix(_REF_PREFIX)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).removeprefix(_REF_PREFIX)
    return None


def _convert(
    node: dict[str, Any], where: str, map_keys: set[str], todo: list[str]
) -> dict[str, Any]:
    """One schema node, structural and without descriptions; referenced types go to todo."""
    ref = _ref_name(node)
    if ref is not None:
        if ref in _INT_OR_STRING:
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            }
        todo.append(ref)
        return {"$ref": _short(ref)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEPT_KEYS or (key == "format" and value not in _FORMATS):
            continue
        if key == "properties":
            required = set(node.get("required", []))
            value = {
                name: _convert(prop, f"{where}.{name}", map_keys, todo)
                | _map_key_default(prop, name in map_keys and name not in required)
                for name, prop in sorted(value.items())
                if name not in _DROPPED_PROPERTIES.get(where, ())
            }
        elif key == "required":
            value = [name for name in value if name not in _OPTIONAL.get(where, ())]
            if not value:
                continue
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = _convert(value, f"{where}[]", map_keys, todo)
        out[key] = value
    if where in ENUMS:
        out["enum"] = ENUMS[where]
    return out


def _map_key_default(prop: dict[str, Any], is_optional_map_key: bool) -> dict[str, Any]:
    # A CRD refuses a map-type list whose key is neither required nor defaulted
    # (ContainerPort.protocol defaults to TCP).
    if is_optional_map_key and "default" in prop and not isinstance(prop["default"], dict):
        return {"default": prop["default"]}
    return {}


def _map_keys(schemas: dict[str, Any]) -> set[str]:
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            keys.update(node.get("x-kubernetes-list-map-keys", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schemas)
    return keys


def extract(document: dict[str, Any]) -> dict[str, Any]:
    """The committed data: every type reachable from ROOTS, by short name, sorted."""
    schemas = document["components"]["schemas"]
    map_keys = _map_keys(schemas)
    todo = [_CORE + root for root in ROOTS]
    out: dict[str, Any] = {}
    while todo:
        name = todo.pop()
        short = _short(name)
        if short in out:
            continue
        if name == _OBJECT_META:
            meta = {"type": "object", "additionalProperties": {"type": "string"}}
            out[short] = {"type": "object", "properties": {"annotations": meta, "labels": meta}}
            continue
        out[short] = _convert(schemas[name], short, map_keys, todo)
    for where in ENUMS:  # a renamed core field must not lose its check silently
        kind, field = where.split(".")
        if out.get(kind, {}).get("properties", {}).get(field, {}).get("enum") != ENUMS[where]:
            raise ValueError(f"ENUMS names {where}, which the source does not have")
    return {"source": SOURCE_PATH, "schemas": dict(sorted(out.items()))}


def render(data: dict[str, Any]) -> str:
    """core_v1.json's exact text (stable key order, one type per line group)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


@cache
def _schemas() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA_FILE.read_text())
    return data["schemas"]  # type: ignore[no-any-return]


def inline(name: str) -> dict[str, Any]:
    """The structural schema of core/v1 type `name` with every $ref resolved."""
    schema: dict[str, Any] = _resolve(_schemas()[name], (name,))
    return schema


def _resolve(node: Any, seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_resolve(v, seen) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        if ref in seen:
            raise ValueError(f"core/v1 type {ref} refers to itself: {' -> '.join(seen)}")
        return _resolve(_schemas()[ref], (*seen, ref))
    # "atomic" is what an unmarked list of a CRD schema is (apiextensions' default, for
    # server-side apply and CEL alike): written out, its ~480 copies across the three roles'
    # templates cost 16 KB of the CRD's budget (test_crd.py).
    return {k: _resolve(v, seen) for k, v in node.items() if (k, v) != (_LIST_TYPE, "atomic")}


_LIST_TYPE = "x-kubernetes-list-type"


def main(argv: list[str]) -> int:
    """Regenerate core_v1.json from the OpenAPI v3 document at argv[0]."""
    if len(argv) != 1:
        sys.stderr.write(f"usage: python -m dtjob_api.coreschema {SOURCE_PATH}\n")
        return 2
    DATA_FILE.write_text(render(extract(json.loads(Path(argv[0]).read_text()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

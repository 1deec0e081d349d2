"""The Helm chart: `helm lint` and `helm template` succeed, and what they render runs the
operator safely with the settings and permissions it needs. helm is the pinned, cached
build from hack/build-binaries.sh (built on first use)."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from dtjob_operator.settings import OperatorSettings

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "dtjob-operator"
KUBE_VERSION = "v1.33.13"


@functools.cache
def helm() -> str:
    build = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "helm"], capture_output=True, text=True
    )
    assert build.returncode == 0, f"building helm failed: {build.stderr}"
    return str(Path(build.stdout.strip().splitlines()[-1]) / "helm")


def run_helm(*args: str) -> str:
    result = subprocess.run([helm(), *args], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def render(*sets: str, include_crds: bool = False) -> dict[tuple[str, str], dict[str, Any]]:
    """`helm template` as {(kind, name): object}."""
    args = ["template", "dtj", str(CHART), "--namespace", "dtjob-system"]
    args += ["--kube-version", KUBE_VERSION]
    if include_crds:
        args.append("--include-crds")
    for s in sets:
        args += ["--set", s]
    docs = [d for d in yaml.safe_load_all(run_helm(*args)) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def deployment(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [o for (kind, _), o in objects.items() if kind == "Deployment"]
    return dep


def container(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (c,) = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return c  # type: ignore[no-any-return]


def env(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(objects)["env"]}


def test_helm_lint_passes() -> None:
    out = run_helm("lint", str(CHART), "--kube-version", KUBE_VERSION.lstrip("v"))
    assert "0 chart(s) failed" in out


def test_renders_one_of_each_resource_with_standard_labels() -> None:
    objects = render()
    assert sorted(kind for kind, _ in objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Pod",  # the `helm test` hook
        "Service",
        "ServiceAccount",
    ]
    for obj in objects.values():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "dtjob-operator"
        assert labels["app.kubernetes.io/instance"] == "dtj"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_operator_runs_unprivileged_with_a_read_only_root() -> None:
    objects = render()
    pod = deployment(objects)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = container(objects)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {m["mountPath"] for m in container(objects)["volumeMounts"]} == {"/tmp"}
    assert pod["serviceAccountName"] == "dtj-dtjob-operator"


def test_liveness_probe_hits_kopfs_health_endpoint() -> None:
    objects = render()
    c = container(objects)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8000, "health": 8080}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert env(objects)["DTJOB_LIVENESS_ENDPOINT"] == "http://0.0.0.0:8080/healthz"
    assert env(objects)["DTJOB_METRICS_PORT"] == "8000"


def test_settings_come_from_values() -> None:
    objects = render(
        "namespaces={team-a,team-b}",
        "trainer.image.tag=dev",
        "image.tag=dev",
        "logLevel=DEBUG",
        "health.port=9090",
    )
    e = env(objects)
    assert e["DTJOB_NAMESPACES"] == "team-a,team-b"
    assert e["DTJOB_TRAINER_IMAGE"] == "dtjob/trainer:dev"
    assert e["DTJOB_LOG_LEVEL"] == "DEBUG"
    assert e["DTJOB_LIVENESS_ENDPOINT"] == "http://0.0.0.0:9090/healthz"
    assert container(objects)["image"] == "dtjob/operator:dev"
    defaults = env(render())
    assert defaults["DTJOB_TRAINER_IMAGE"] == "dtjob/trainer:0.1.0"  # the appVersion
    assert defaults["DTJOB_ALLOW_HOST_PATH"] == "false"
    assert env(render("allowHostPath=true"))["DTJOB_ALLOW_HOST_PATH"] == "true"
    assert defaults["DTJOB_NAMESPACES"] == ""  # the whole cluster


def test_every_env_var_is_a_setting_the_operator_reads() -> None:
    e = env(render())
    fields = {f"DTJOB_{name.upper()}" for name in OperatorSettings.model_fields}
    assert set(e) <= fields, f"unknown settings: {set(e) - fields}"
    # And they parse: a typo in a value's format would stop the operator at start-up.
    parsed = OperatorSettings(**{k.removeprefix("DTJOB_").lower(): v for k, v in e.items()})
    assert parsed.standalone is True and parsed.namespaces == []


def rules_for(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    (role,) = [o for (kind, _), o in objects.items() if kind == "ClusterRole"]
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_cluster_role_grants_what_the_operator_needs_and_no_wildcards() -> None:
    rules = rules_for(render())
    assert all("*" not in verbs for verbs in rules.values())
    assert all("*" not in key for keys in rules for key in keys)
    assert {"get", "list", "watch", "patch"} <= rules[("dtjob.io", "distributedtrainingjobs")]
    assert {"get", "patch", "update"} <= rules[("dtjob.io", "distributedtrainingjobs/status")]
    for kind in ("pods", "services", "configmaps", "serviceaccounts"):
        assert {"get", "list", "watch", "create", "delete"} <= rules[("", kind)], kind
    for kind in ("roles", "rolebindings"):
        assert {"create", "get"} <= rules[("rbac.authorization.k8s.io", kind)], kind
    # RBAC escalation: the operator may grant trainer pods get/patch on their progress
    # ConfigMap only because it holds that permission itself.
    assert {"get", "patch"} <= rules[("", "configmaps")]
    assert {"create", "patch"} <= rules[("", "events")]
    for kind in ("resourcequotas", "nodes"):
        assert rules[("", kind)] == {"get", "list", "watch"}
    assert rules[("scheduling.k8s.io", "priorityclasses")] == {"get", "list", "watch"}
    assert ("kopf.dev", "clusterkopfpeerings") in rules
    assert ("", "secrets") not in rules
    # The checkpoint claim is read, never listed, watched or changed.
    assert rules[("", "persistentvolumeclaims")] == {"get"}


def test_binding_ties_the_role_to_the_service_account() -> None:
    objects = render()
    binding = objects[("ClusterRoleBinding", "dtj-dtjob-operator")]
    assert binding["roleRef"]["name"] == "dtj-dtjob-operator"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "dtj-dtjob-operator", "namespace": "dtjob-system"}
    ]


def test_metrics_service_selects_the_operator_pod() -> None:
    objects = render()
    svc = objects[("Service", "dtj-dtjob-operator-metrics")]
    pod_labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert ("Service", "dtj-dtjob-operator-metrics") not in render("metrics.service.enabled=false")


def test_helm_test_hook_checks_the_metrics_service_unprivileged() -> None:
    objects = render("metrics.port=9100")
    pod = objects[("Pod", "dtj-dtjob-operator-test-metrics")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["image"] == container(objects)["image"]
    assert c["securityContext"] == container(objects)["securityContext"]
    assert "http://dtj-dtjob-operator-metrics.dtjob-system.svc:9100/metrics" in c["command"][-1]
    # No Service, nothing to test: the hook goes with it.
    assert not [k for k in render("metrics.service.enabled=false") if k[0] == "Pod"]


def test_crds_ship_with_the_chart() -> None:
    objects = render(include_crds=True)
    crd = objects[("CustomResourceDefinition", "distributedtrainingjobs.dtjob.io")]
    assert crd["spec"]["names"]["shortNames"] == ["dtj"]


def test_every_value_is_documented() -> None:
    """Each key of values.yaml, or a parent of it, has a `# --` comment (helm-docs style)."""
    undocumented = []
    documented_at: list[int] = []  # indentation levels whose key carries a `# --` comment
    comment: list[str] = []
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        key = re.match(r"^(\s*)([A-Za-z][\w]*):", line)
        if not key:
            comment = []
            continue
        indent = len(key.group(1))
        documented_at = [i for i in documented_at if i < indent]
        if any(c.startswith("# --") for c in comment):
            documented_at.append(indent)
        has_children = line.rstrip().endswith(":")
        if not documented_at and not has_children:
            undocumented.append(key.group(2))
        comment = []
    assert not undocumented, f"values without a `# --` comment: {undocumented}"


def test_notes_tell_the_next_command() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "kubectl apply -f examples/cpu/data-parallel.yaml" in notes
    assert "kubectl get dtj" in notes

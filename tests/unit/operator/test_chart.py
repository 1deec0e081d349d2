"""The Helm chart: `helm lint` and `helm template` succeed, and what they render runs the
operator safely with the settings and permissions it needs. helm is the pinned, cached
build from hack/build-binaries.sh (built on first use)."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob_operator.health import READINESS_PATH
from dtjob_operator.settings import OperatorSettings

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "dtjob-operator"
KUBE_VERSION = "v1.33.13"
# The chart renders the CRD (~800 KB of YAML): the C loader reads it in a tenth of the time.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def render(*sets: str) -> dict[tuple[str, str], dict[str, Any]]:
    """`helm template` as {(kind, name): object}."""
    args = ["template", "dtj", str(CHART), "--namespace", "dtjob-system"]
    args += ["--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    docs = [d for d in yaml.load_all(run_helm(*args), Loader=LOADER) if d]
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
        "ClusterRole",  # -cluster-reads
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "CustomResourceDefinition",  # templates/crds.yaml, so that `helm upgrade` upgrades it
        "Deployment",
        "Pod",  # the `helm test` hook
        "Role",  # -leader-election
        "RoleBinding",
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


def test_liveness_probe_hits_the_operators_health_endpoint() -> None:
    objects = render()
    c = container(objects)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8000, "health": 8080}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert env(objects)["DTJOB_LIVENESS_ENDPOINT"] == "http://0.0.0.0:8080/healthz"
    assert env(objects)["DTJOB_LIVENESS_STUCK_SECONDS"] == "300"
    assert env(objects)["DTJOB_METRICS_PORT"] == "8000"


def test_readiness_probe_hits_the_operators_readiness_endpoint() -> None:
    probe = container(render("health.readinessProbe.periodSeconds=7"))["readinessProbe"]
    assert probe["httpGet"] == {"path": READINESS_PATH, "port": "health"}
    assert probe["periodSeconds"] == 7
    assert probe["failureThreshold"] == 3


def pdbs(objects: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for (kind, _), o in objects.items() if kind == "PodDisruptionBudget"]


def test_a_pod_disruption_budget_only_for_several_replicas() -> None:
    assert pdbs(render()) == []
    objects = render("replicaCount=3", "standalone=false")
    (pdb,) = pdbs(objects)
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["metadata"]["namespace"] == "dtjob-system"
    # One replica at a time may go: a standby is always left to take over the Lease.
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    pod_labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["metadata"]["labels"]["app.kubernetes.io/instance"] == "dtj"
    assert deployment(objects)["spec"]["replicas"] == 3


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
    assert defaults["DTJOB_MAX_TERMINATION_GRACE_PERIOD_SECONDS"] == "300"
    assert (
        defaults["DTJOB_ALLOWED_CAPABILITIES"] == defaults["DTJOB_ALLOWED_PRIORITY_CLASSES"] == ""
    )
    assert defaults["DTJOB_ALLOW_HOST_NAMESPACES"] == defaults["DTJOB_ALLOW_PRIVILEGED"] == "false"
    assert defaults["DTJOB_NAMESPACES"] == ""  # the whole cluster


def test_force_delete_margin_comes_from_values_with_the_codes_default() -> None:
    default = env(render())["DTJOB_FORCE_DELETE_MARGIN_SECONDS"]
    assert float(default) == OperatorSettings().force_delete_margin_seconds
    margin = env(render("forceDeleteMarginSeconds=90"))["DTJOB_FORCE_DELETE_MARGIN_SECONDS"]
    assert OperatorSettings(force_delete_margin_seconds=margin).force_delete_margin_seconds == 90


def test_every_env_var_is_a_setting_the_operator_reads() -> None:
    e = env(render())
    fields = {f"DTJOB_{name.upper()}" for name in OperatorSettings.model_fields}
    assert set(e) <= fields, f"unknown settings: {set(e) - fields}"
    # And they parse: a typo in a value's format would stop the operator at start-up.
    parsed = OperatorSettings(**{k.removeprefix("DTJOB_").lower(): v for k, v in e.items()})
    assert parsed.standalone is True and parsed.namespaces == []


def test_api_client_limits_come_from_values() -> None:
    defaults = env(render())
    assert defaults["DTJOB_API_QPS"] == "200"
    assert defaults["DTJOB_API_BURST"] == "400"
    assert defaults["DTJOB_API_LIST_PAGE_SIZE"] == "500"
    assert defaults["DTJOB_API_CONNECT_TIMEOUT_SECONDS"] == "5"
    assert defaults["DTJOB_API_READ_TIMEOUT_SECONDS"] == "30"
    # The chart's defaults are the operator's own, so an install without values behaves
    # like `python -m dtjob_operator`.
    s = OperatorSettings()
    assert (s.api_qps, s.api_burst, s.api_list_page_size) == (200, 400, 500)
    assert (s.api_connect_timeout_seconds, s.api_read_timeout_seconds) == (5, 30)
    e = env(render("api.qps=20", "api.burst=30", "api.listPageSize=100",
                   "api.connectTimeoutSeconds=2", "api.readTimeoutSeconds=10"))  # fmt: skip
    parsed = OperatorSettings(**{k.removeprefix("DTJOB_").lower(): v for k, v in e.items()})
    assert (parsed.api_qps, parsed.api_burst, parsed.api_list_page_size) == (20, 30, 100)
    assert (parsed.api_connect_timeout_seconds, parsed.api_read_timeout_seconds) == (2, 10)


def render_list(*sets: str) -> list[dict[str, Any]]:
    """`helm template` as a list (Roles of one name in several namespaces stay apart)."""
    args = ["template", "dtj", str(CHART), "--namespace", "dtjob-system"]
    args += ["--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.load_all(run_helm(*args), Loader=LOADER) if d]


Grant = tuple[str, str, str]  # (API group, resource, verb)


def grants(*roles: dict[str, Any]) -> set[Grant]:
    return {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used_by_the_operator() -> set[Grant]:
    """What the code calls (k8s.API_CALLS, caches.CACHE_CALLS, handlers.KOPF_CALLS) and what
    a job's Role hands on to its pods (RBAC lets the operator grant only what it holds)."""
    from unit.operator.builders import a_job

    from dtjob_operator.builders.job import Job
    from dtjob_operator.builders.rbac import build_rbac
    from dtjob_operator.caches import CACHE_CALLS
    from dtjob_operator.handlers import KOPF_CALLS
    from dtjob_operator.k8s import API_CALLS

    job = Job.from_object(a_job().with_workers(1).obj())
    (role,) = [m for m in build_rbac(job) if m["kind"] == "Role"]
    return set(API_CALLS) | set(CACHE_CALLS) | set(KOPF_CALLS) | grants(role)


def roles_of(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_rbac_grants_exactly_what_the_code_calls() -> None:
    docs = render_list()
    granted = grants(*roles_of(docs, "ClusterRole"), *roles_of(docs, "Role"))
    used = used_by_the_operator()
    assert granted - used == set(), "granted but never called: remove from the chart"
    assert used - granted == set(), "called but not granted: add to the chart"
    assert ("", "secrets", "get") not in granted


def test_node_patch_is_granted_only_to_taint_suspect_nodes() -> None:
    from dtjob_operator.k8s import TAINT_CALLS

    docs = render_list("taintSuspectNodes=true")
    granted = grants(*roles_of(docs, "ClusterRole"), *roles_of(docs, "Role"))
    assert granted == used_by_the_operator() | TAINT_CALLS
    assert env(render("taintSuspectNodes=true"))["DTJOB_TAINT_SUSPECT_NODES"] == "true"
    assert env(render())["DTJOB_TAINT_SUSPECT_NODES"] == "false"


def test_leases_only_in_the_release_namespace() -> None:
    docs = render_list()
    assert not any(g[1] == "leases" for g in grants(*roles_of(docs, "ClusterRole")))
    (lease_role,) = [
        r for r in roles_of(docs, "Role") if "leader-election" in r["metadata"]["name"]
    ]
    assert lease_role["metadata"]["namespace"] == "dtjob-system"
    assert grants(lease_role) == {("coordination.k8s.io", "leases", v)
                                  for v in ("get", "create", "update")}  # fmt: skip
    (binding,) = [b for b in roles_of(docs, "RoleBinding") if b["roleRef"]["kind"] == "Role"]
    assert binding["metadata"]["namespace"] == "dtjob-system"
    assert binding["roleRef"]["name"] == lease_role["metadata"]["name"]


def test_namespaced_mode_grants_jobs_per_namespace_and_only_reads_cluster_wide() -> None:
    docs = render_list("namespaces={team-a,team-b}")
    cluster_wide = grants(*roles_of(docs, "ClusterRole"))
    # No ClusterRole for jobs: nothing cluster-wide may change anything.
    assert {verb for _, _, verb in cluster_wide} <= {"get", "list", "watch"}
    assert not any(group == "dtjob.io" for group, _, _ in cluster_wide)
    job_roles = [
        r for r in roles_of(docs, "Role") if "leader-election" not in r["metadata"]["name"]
    ]
    assert sorted(r["metadata"]["namespace"] for r in job_roles) == ["team-a", "team-b"]
    bindings = [
        b for b in roles_of(docs, "RoleBinding") if b["metadata"]["namespace"] != "dtjob-system"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    # Together they still grant everything the code calls.
    assert grants(*roles_of(docs, "ClusterRole"), *roles_of(docs, "Role")) == used_by_the_operator()
    bound = {d["roleRef"]["name"] for d in roles_of(docs, "ClusterRoleBinding")}
    assert bound == {"dtj-dtjob-operator-cluster-reads"}


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
    objects = render()
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


def test_guard_rails_come_from_values_as_the_operator_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    e = env(
        render(
            "allowHostNamespaces=true",
            "allowPrivileged=true",
            "allowedCapabilities={IPC_LOCK,SYS_RESOURCE}",
            "allowedPriorityClasses={team-*,prod}",
            "maxTerminationGracePeriodSeconds=900",
        )
    )
    for name, value in e.items():
        if name.startswith("DTJOB_"):
            monkeypatch.setenv(name, value)
    rails = OperatorSettings().guard_rails()
    assert rails.allow_host_namespaces and rails.allow_privileged
    assert rails.allowed_capabilities == ("IPC_LOCK", "SYS_RESOURCE")
    assert rails.allowed_priority_classes == ("team-*", "prod")
    assert rails.max_termination_grace_period_seconds == 900


def test_topology_levels_come_from_values_as_the_operator_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    levels = ["network.example.com/block", "network.example.com/rack", "kubernetes.io/hostname"]
    for name, value in env(render(f"admission.topologyLevels={{{','.join(levels)}}}")).items():
        if name.startswith("DTJOB_"):
            monkeypatch.setenv(name, value)
    assert OperatorSettings().topology_levels == levels
    for name, value in env(render()).items():
        if name.startswith("DTJOB_"):
            monkeypatch.setenv(name, value)
    assert OperatorSettings().topology_levels == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]


def test_avoid_node_seconds_comes_from_values_with_the_codes_default() -> None:
    default = env(render())["DTJOB_AVOID_NODE_SECONDS"]
    assert float(default) == OperatorSettings().avoid_node_seconds
    off = env(render("avoidNodeSeconds=0"))["DTJOB_AVOID_NODE_SECONDS"]
    assert OperatorSettings(avoid_node_seconds=off).avoid_node_seconds == 0

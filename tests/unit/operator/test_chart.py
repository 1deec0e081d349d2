"""The Helm chart: `helm lint` and `helm template` succeed, and what they render runs the
operator safely with the settings and permissions it needs. helm is the pinned, cached
build from hack/build-binaries.sh (built on first use)."""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import yaml

from dtjob_operator.api.spec import QUANTITY_PATTERN
from dtjob_operator.health import READINESS_PATH
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
        "ClusterRole",  # -cluster-reads
        "ClusterRoleBinding",
        "ClusterRoleBinding",
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
    assert defaults["DTJOB_API_QPS"] == "100"
    assert defaults["DTJOB_API_BURST"] == "200"
    assert defaults["DTJOB_API_LIST_PAGE_SIZE"] == "500"
    assert defaults["DTJOB_API_CONNECT_TIMEOUT_SECONDS"] == "5"
    assert defaults["DTJOB_API_READ_TIMEOUT_SECONDS"] == "30"
    # The chart's defaults are the operator's own, so an install without values behaves
    # like `python -m dtjob_operator`.
    s = OperatorSettings()
    assert (s.api_qps, s.api_burst, s.api_list_page_size) == (100, 200, 500)
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
    return [d for d in yaml.safe_load_all(run_helm(*args)) if d]


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
    assert {verb for _, _, verb in cluster_wide} <= {"list", "watch"}
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


def refusal(*args: str) -> str:
    """`helm template` with these arguments must fail; its error output."""
    argv = [helm(), "template", "dtj", str(CHART), "--kube-version", KUBE_VERSION, *args]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    assert result.returncode != 0, f"helm accepted {args}"
    return result.stderr


SCHEMA_ERROR = "values don't meet the specifications of the schema"


def test_a_typo_in_a_value_name_is_refused() -> None:
    err = refusal("--set", "wokers=8")
    assert SCHEMA_ERROR in err and "additional properties 'wokers' not allowed" in err
    err = refusal("--set", "admission.podsReadyTimeout=60")
    assert "at '/admission'" in err and "'podsReadyTimeout' not allowed" in err


def test_a_value_of_the_wrong_type_is_refused() -> None:
    err = refusal("--set", "workers=four")
    assert SCHEMA_ERROR in err and "at '/workers': got string, want integer" in err
    err = refusal("--set", "trainer.podSecurityDefaults=yes")
    assert "at '/trainer/podSecurityDefaults': got string, want boolean" in err
    lint = subprocess.run(
        [helm(), "lint", str(CHART), "--kube-version", KUBE_VERSION.lstrip("v"),
         "--set", "workers=four"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert lint.returncode != 0 and "at '/workers': got string, want integer" in lint.stdout
    # A number where Kubernetes wants a string: the tag must be passed with --set-string.
    assert "at '/image/tag': got number, want string" in refusal("--set", "image.tag=2")


def test_a_number_out_of_range_or_a_word_off_the_list_is_refused() -> None:
    assert "at '/workers': minimum: got 0, want 1" in refusal("--set", "workers=0")
    assert "at '/health/port': maximum" in refusal("--set", "health.port=70000")
    assert "at '/api/qps': exclusiveMinimum" in refusal("--set", "api.qps=0")
    err = refusal("--set", "admission.mode=kueue")
    assert "at '/admission/mode': value must be one of 'builtin', 'external'" in err
    assert "at '/logLevel'" in refusal("--set", "logLevel=VERBOSE")
    assert "at '/namespaces/0'" in refusal("--set", "namespaces={Team_A}")
    assert "at '/trainer/defaultShmPerGpu'" in refusal("--set", "trainer.defaultShmPerGpu=lots")


def test_several_replicas_must_elect_a_leader() -> None:
    err = refusal("--set", "replicaCount=2")
    assert "replicaCount is 2 but standalone is true: set standalone=false" in err
    assert deployment(render("replicaCount=2", "standalone=false"))["spec"]["replicas"] == 2


def test_the_e2e_install_renders_with_its_values() -> None:
    """hack/realnode-helm.sh's own --set flags (the e2e tier's `helm install`) pass the
    schema and place the operator on the real node."""
    script = (REPO / "hack" / "realnode-helm.sh").read_text()
    flags = re.findall(r"(--set(?:-string)?) ('[^']*')", script)
    assert len(flags) == 3, "hack/realnode-helm.sh changed: update this test"
    args = ["template", "dtjob", str(CHART), "--namespace", "dtjob-system"]
    args += ["--kube-version", KUBE_VERSION]
    for flag, value in flags:
        args += [flag, *shlex.split(value)]
    docs = [d for d in yaml.safe_load_all(run_helm(*args)) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"dtjob.io/node": "real"}
    assert pod["tolerations"] == [
        {"key": "dtjob.io/node", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    ]
    assert dep["spec"]["replicas"] == 1
    assert pod["containers"][0]["image"] == "dtjob/operator:0.1.0"  # what hack/images.sh tags
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())  # type: ignore[no-any-return]


def leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml down to the Kubernetes-typed ones (podSecurityContext...)."""
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths.append(path)
        if isinstance(value, dict) and value and path not in OPEN_VALUES:
            paths += leaf_paths(value, f"{path}.")
    return paths


# Values whose contents are Kubernetes objects the API server validates field by field.
OPEN_VALUES = {"podSecurityContext", "securityContext", "resources", "affinity"}


def schema_at(path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema()
    for key in path.split("."):
        node = (node or {}).get("properties", {}).get(key)
    return node


def test_the_schema_covers_every_value_and_closes_every_group() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [p for p in leaf_paths(values) if schema_at(p) is None]
    assert missing == [], f"values.yaml keys without a schema: {missing}"

    def open_groups(node: dict[str, Any], path: str) -> list[str]:
        found = []
        if "properties" in node and node.get("additionalProperties") is not False:
            found.append(path or "<root>")
        for key, child in node.get("properties", {}).items():
            found += open_groups(child, f"{path}.{key}".lstrip("."))
        return found

    assert open_groups(schema(), "") == [], "a typo there would pass silently"
    assert schema()["$schema"] == "http://json-schema.org/draft-07/schema#"


# Chart value -> the operator setting it becomes: the schema's bounds are the operator's own,
# so a value the schema lets through never stops the operator at start-up.
BOUNDED = {
    "workers": "workers",
    "forceDeleteMarginSeconds": "force_delete_margin_seconds",
    "trainer.terminationGracePeriodSeconds": "termination_grace_period_seconds",
    "health.stuckSeconds": "liveness_stuck_seconds",
    "admission.podsReadyTimeoutSeconds": "pods_ready_timeout_seconds",
    "admission.requeueBackoffSeconds": "requeue_backoff_seconds",
    "admission.maxRequeueBackoffSeconds": "max_requeue_backoff_seconds",
    "api.qps": "api_qps",
    "api.burst": "api_burst",
    "api.listPageSize": "api_list_page_size",
    "api.connectTimeoutSeconds": "api_connect_timeout_seconds",
    "api.readTimeoutSeconds": "api_read_timeout_seconds",
}


def test_numeric_bounds_are_the_operators_own() -> None:
    for value, field in BOUNDED.items():
        bounds: dict[str, float] = {}
        for rule in OperatorSettings.model_fields[field].metadata:
            for attr, keyword in (("ge", "minimum"), ("gt", "exclusiveMinimum"),
                                  ("le", "maximum"), ("lt", "exclusiveMaximum")):  # fmt: skip
                if getattr(rule, attr, None) is not None:
                    bounds[keyword] = getattr(rule, attr)
        node = schema_at(value)
        assert node is not None
        assert {k: node[k] for k in node if k in bounds or k.endswith("imum")} == bounds, value
    shm = schema_at("trainer.defaultShmPerGpu")
    assert shm is not None and shm["pattern"] == QUANTITY_PATTERN
    # Enumerations too.
    log_level, mode = schema_at("logLevel"), schema_at("admission.mode")
    assert log_level is not None and mode is not None
    level_pattern = OperatorSettings.model_fields["log_level"].metadata[0].pattern
    assert level_pattern == "^(" + "|".join(log_level["enum"]) + ")$"
    assert tuple(mode["enum"]) == get_args(OperatorSettings.model_fields["admission"].annotation)


def test_the_readme_values_table_is_current_and_names_every_value() -> None:
    check = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart_values_table.py"), "--check"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    paths = leaf_paths(values)
    for path in [p for p in paths if not any(q.startswith(f"{p}.") for q in paths)]:
        prefixes = [".".join(path.split(".")[:n]) for n in range(1, path.count(".") + 2)]
        assert any(f"| `{p}` |" in readme for p in prefixes), f"README misses {path}"
    # What a user needs besides the table.
    needed = ["helm install", "helm upgrade", "--server-side", "image.repository",
              "trainer.image.repository", "imagePullSecrets", "## RBAC", "/readyz"]  # fmt: skip
    assert [n for n in needed if n not in readme] == []

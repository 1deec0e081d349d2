"""The chart's values.schema.json: helm refuses a misspelt, mistyped or out-of-range value
naming the field; the schema covers every value with the operator's own bounds, and the
chart README's values table is current."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from typing import Any, get_args

import yaml
from unit.operator.test_chart import CHART, KUBE_VERSION, REPO, deployment, helm, render, run_helm

from dtjob_api.spec import QUANTITY_PATTERN
from dtjob_operator.settings import OperatorSettings


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
    err = refusal("--set", "admission.mode=volcano")
    assert "at '/admission/mode': value must be one of 'builtin', 'kueue', 'external'" in err
    assert "at '/logLevel'" in refusal("--set", "logLevel=VERBOSE")
    assert "at '/namespaces/0'" in refusal("--set", "namespaces={Team_A}")
    assert "at '/trainer/defaultShmPerGpu'" in refusal("--set", "trainer.defaultShmPerGpu=lots")


def test_several_replicas_must_elect_a_leader() -> None:
    err = refusal("--set", "replicaCount=2")
    assert "replicaCount is 2 but standalone is true: set standalone=false" in err
    assert deployment(render("replicaCount=2", "standalone=false"))["spec"]["replicas"] == 2


def test_the_e2e_install_renders_with_its_values() -> None:
    """hack/realnode-helm.sh's own --set flags (the e2e tier's `helm install`) pass the
    schema, take the images from the node's registry and place the operator on the node."""
    script = (REPO / "hack" / "realnode-helm.sh").read_text()
    # What hack/images.sh records in pushed.env, e.g.:
    script = script.replace("$REGISTRY", "127.0.0.1:16454").replace("$TAG", "0.1.0-0123456789ab")
    flags = re.findall(r"(--set(?:-string)?) ('[^']*'|[\w.]+=\S+)", script)
    assert len(flags) == 7, "hack/realnode-helm.sh changed: update this test"
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
    [container] = pod["containers"]
    assert container["image"] == "127.0.0.1:16454/dtjob-operator:0.1.0-0123456789ab"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DTJOB_TRAINER_IMAGE"] == "127.0.0.1:16454/dtjob-trainer:0.1.0-0123456789ab"
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


# Values whose contents are Kubernetes objects the API server validates field by field, or
# maps whose keys are the user's (a default entry is an example, not a value of its own).
OPEN_VALUES = {"podSecurityContext", "securityContext", "resources", "affinity",
               "metrics.grafanaDashboard.labels"}  # fmt: skip


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

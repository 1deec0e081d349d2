"""The CRD as a chart template (templates/crds.yaml): rendered from the generated copy in
files/crds/ so that `helm upgrade` upgrades it, kept on `helm uninstall`, and left out with
crds.install=false. (tests/integration/test_chart_crd_upgrade.py runs it against a real
API server; test_crd.py holds files/crds/ to the models.)"""

from __future__ import annotations

from typing import Any

import yaml
from unit.operator.test_chart import CHART, REPO, render
from unit.operator.test_chart_schema import refusal

CRD_NAME = "distributedtrainingjobs.dtjob.io"


def crds(objects: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for (kind, _), o in objects.items() if kind == "CustomResourceDefinition"]


def test_the_chart_renders_the_generated_crd_unchanged_but_for_its_metadata() -> None:
    (rendered,) = crds(render())
    generated = yaml.safe_load(
        (REPO / "crds" / "dtjob.io_distributedtrainingjobs.yaml").read_text()
    )
    assert rendered["metadata"]["name"] == CRD_NAME
    # Integers stay integers (the text is inserted, not parsed and re-written).
    assert {k: v for k, v in rendered.items() if k != "metadata"} == {
        k: v for k, v in generated.items() if k != "metadata"
    }


def test_the_crd_is_kept_on_uninstall_and_labelled_as_the_charts() -> None:
    (crd,) = crds(render())
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "dtjob"


def test_crds_install_false_leaves_the_crd_to_the_admin() -> None:
    assert crds(render("crds.install=false")) == []
    # Nothing else depends on it.
    assert len(render("crds.install=false")) == len(render()) - 1


def test_no_crd_in_the_crds_folder_that_helm_would_never_upgrade() -> None:
    assert not (CHART / "crds").exists()


def test_crds_install_must_be_a_boolean() -> None:
    assert "at '/crds/install': got string, want boolean" in refusal("--set", "crds.install=yes")
    assert "'instal' not allowed" in refusal("--set", "crds.instal=false")

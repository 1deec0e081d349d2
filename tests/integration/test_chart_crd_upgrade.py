"""The chart's CRD on a real API server with the real helm: `helm install` creates it,
`helm upgrade` with a newer CRD changes it (Helm never upgrades a chart's crds/ folder, so
the chart renders it from a template), `helm uninstall` and crds.install=false keep it, and
the release Secret stays far below the 1 MiB a Secret may hold.

The charts installed are copies of the chart whose CRD is moved to a group of its own, so
the test never touches the distributedtrainingjobs.dtjob.io that other tests share; the
template and everything else are the chart's."""

from __future__ import annotations

import base64
import gzip
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from helpers.kube import wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dtjob-operator"
CRD_FILE = "files/crds/dtjob.io_distributedtrainingjobs.yaml"
SECRET_LIMIT = 1024 * 1024  # bytes of data a Secret may hold


def helm() -> str:
    build = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh"), "helm"], capture_output=True, text=True
    )
    assert build.returncode == 0, f"building helm failed: {build.stderr}"
    return str(Path(build.stdout.strip().splitlines()[-1]) / "helm")


def chart_copy(dest: Path, group: str, new_field: str | None = None) -> Path:
    """The chart with its CRD in `group` (short name and category changed likewise), and
    optionally one more spec field: a newer chart's CRD."""
    shutil.copytree(CHART, dest)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((dest / CRD_FILE).read_text(), Loader=loader)
    names = crd["spec"]["names"]
    crd["metadata"]["name"] = f"{names['plural']}.{group}"
    crd["spec"]["group"] = group
    names["shortNames"] = [group.split(".")[0]]
    names["categories"] = [group.split(".")[0]]
    if new_field:
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"][new_field] = {"type": "string", "description": "Added by a newer chart."}
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    (dest / CRD_FILE).write_text(yaml.dump(crd, Dumper=dumper, sort_keys=False))
    return dest


class Release:
    def __init__(self, cluster: Any, name: str, namespace: str) -> None:
        self.cluster, self.name, self.namespace = cluster, name, namespace

    def helm(self, *args: str) -> str:
        argv = [helm(), "--kubeconfig", str(self.cluster.kubeconfig), "--namespace", self.namespace]
        result = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
        return result.stdout


@pytest.fixture
def release(cluster: Any) -> Iterator[Release]:
    tag = uuid.uuid4().hex[:6]
    rel = Release(cluster, f"crd-{tag}", f"crd-{tag}-system")
    yield rel
    subprocess.run([helm(), "--kubeconfig", str(cluster.kubeconfig), "uninstall", rel.name,
                    "--namespace", rel.namespace], capture_output=True)  # fmt: skip
    ext = client.ApiextensionsV1Api(cluster.api)
    for crd in ext.list_custom_resource_definition().items:
        if crd.spec.group == f"t{tag}.dtjob.io":
            ext.delete_custom_resource_definition(crd.metadata.name)
    client.CoreV1Api(cluster.api).delete_namespace(rel.namespace)


def served_spec_fields(ext: client.ApiextensionsV1Api, name: str) -> set[str]:
    crd = ext.read_custom_resource_definition(name)
    return set(crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties)


def test_helm_upgrade_upgrades_the_crd_and_uninstall_keeps_it(
    cluster: Any, release: Release, tmp_path: Path
) -> None:
    group = f"t{release.name.removeprefix('crd-')}.dtjob.io"
    name = f"distributedtrainingjobs.{group}"
    ext = client.ApiextensionsV1Api(cluster.api)
    release.helm("install", release.name, str(chart_copy(tmp_path / "v1", group)),
                 "--create-namespace")  # fmt: skip

    crd = ext.read_custom_resource_definition(name)
    assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
    assert crd.metadata.annotations["meta.helm.sh/release-name"] == release.name
    assert "upgradeProbe" not in served_spec_fields(ext, name)

    # What the release costs its Secret: the chart (the CRD among its files) and the
    # rendered manifest (the CRD again), JSON, gzip'd, base64'd by Helm.
    secret = client.CoreV1Api(cluster.api).read_namespaced_secret(
        f"sh.helm.release.v1.{release.name}.v1", release.namespace
    )
    stored = base64.b64decode(secret.data["release"])
    release_json = gzip.decompress(base64.b64decode(stored))
    print(f"release Secret: {len(stored)} bytes stored, {len(release_json)} bytes of JSON")
    assert len(stored) < SECRET_LIMIT / 2, f"{len(stored)} bytes: near the Secret limit"

    release.helm("upgrade", release.name,
                 str(chart_copy(tmp_path / "v2", group, new_field="upgradeProbe")))  # fmt: skip
    wait_for(lambda: "upgradeProbe" in served_spec_fields(ext, name), timeout=30,
             what="the upgraded CRD served")  # fmt: skip

    # Leaving the CRD to the admin from now on does not delete it (and every job with it).
    release.helm("upgrade", release.name, str(tmp_path / "v2"), "--set", "crds.install=false")
    assert "upgradeProbe" in served_spec_fields(ext, name)

    release.helm("uninstall", release.name)
    assert "upgradeProbe" in served_spec_fields(ext, name)

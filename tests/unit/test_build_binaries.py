"""hack/build-binaries.sh's plan: the Kubernetes commands, etcd, kwok, Helm and CoreDNS
from one module, one resolution of it and one `go build`, every other tool beside them, a
failed build named while the rest finish. The Go toolchain is replaced by a recorder here
(a real cold build is minutes: `make demo` on empty caches is where the builds themselves
are exercised)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "hack"))
import realnode  # noqa: E402

# Records each call (cwd and argv) and leaves the binaries a build would; `fail` names
# the package path whose build exits 1.
FAKE_GO = r"""#!/usr/bin/env bash
echo "$PWD|$*" >>"$GO_CALLS"
mk() { : >"$1" && chmod +x "$1"; }
[ "$1" = get ] || sleep "${GO_SLEEP:-0}"
case "$1" in
  get) exit 0 ;;
  mod)  # `go mod download -json k8s.io/kubernetes@v`: a go.mod of the release, in short
    f=$(dirname "$GO_CALLS")/kubernetes.mod
    printf 'module k8s.io/kubernetes\n\nrequire (\n\tgoogle.golang.org/grpc v1.68.1\n' >"$f"
    printf '\tk8s.io/api v0.0.0\n\tk8s.io/klog/v2 v2.130.1 // indirect\n)\n' >>"$f"
    printf '{\n\t"Path": "k8s.io/kubernetes",\n\t"GoMod": "%s"\n}\n' "$f" ;;
  build)
    out=
    while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2 ;; *) pkgs+=("$1"); shift ;; esac; done
    [[ "$out" == */ ]] || { mk "$out"; exit 0; }
    for p in "${pkgs[@]}"; do  # named as Go names them: etcd's server/v3 is server
      [ "$p" != "$GO_FAIL" ] || { echo "compile error in $p"; exit 1; }
      [[ "$p" == -* ]] && continue; n=${p%/v[0-9]}; mk "$out${n##*/}"
    done ;;
  install)
    for p in "$@"; do
      case "$p" in *@*) [ "${p%@*}" != "$GO_FAIL" ] || { echo "compile error in $p"; exit 1; }
        n=${p%@*}; mk "$GOBIN/${n##*/}" ;; esac
    done ;;
esac
"""


def start(tmp_path: Path, *components: str, fail: str = "", sleep: float = 0) -> subprocess.Popen:
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "go").write_text(FAKE_GO)
    (fake / "go").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "GO_FAIL": fail,
           "GO_CALLS": str(tmp_path / "calls"), "GO_SLEEP": str(sleep),
           "DTJOB_CACHE": str(tmp_path / "cache")}  # fmt: skip
    return subprocess.Popen([str(TOP / "hack" / "build-binaries.sh"), *components], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def run(tmp_path: Path, *components: str, fail: str = "") -> tuple[int, str, list[str]]:
    proc = start(tmp_path, *components, fail=fail)
    _, err = proc.communicate(timeout=60)
    calls = tmp_path / "calls"
    lines = calls.read_text().splitlines() if calls.exists() else []
    return proc.returncode, err, lines


TOGETHER = {
    "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet",
    "kube-proxy", "etcd", "kwok", "helm", "coredns",
}  # fmt: skip


def test_the_cluster_tools_resolve_once_and_build_in_one_go_build(tmp_path: Path) -> None:
    kube = ["kube-apiserver", "kubectl", *realnode.BINARIES[:2]]  # control plane + kubelet
    rc, err, calls = run(tmp_path, *kube, "kwok", "etcd")
    assert rc == 0, err
    one = [c for c in calls if "/src/cluster-" in c.split("|")[0]]
    assert [c.split("|")[1].split()[0] for c in one] == ["mod", "get", "build"]
    got, built = one[1].split("|")[1].split(), one[2].split("|")[1].split()
    assert all(f"k8s.io/kubernetes/cmd/{c}" in built for c in kube)
    # Every member of the module, asked for or not: Helm's build shares the others' compiles.
    assert {"go.etcd.io/etcd/server/v3", "sigs.k8s.io/kwok/cmd/kwok",
            "helm.sh/helm/v3/cmd/helm", "./coredns"} <= set(built)  # fmt: skip
    assert any(g.startswith("helm.sh/helm/v3/cmd/helm@") for g in got)
    assert len(calls) == len(one)  # nothing else was built
    bins = next((tmp_path / "cache" / "bin").iterdir())
    assert {p.name for p in bins.iterdir()} == TOGETHER
    # Kubernetes' versions win: its release's requirements are pinned, bar its staging modules.
    gomod = next((tmp_path / "cache" / "src").glob("cluster-*/go.mod")).read_text()
    assert "replace google.golang.org/grpc => google.golang.org/grpc v1.68.1" in gomod
    assert "replace k8s.io/klog/v2 => k8s.io/klog/v2 v2.130.1" in gomod
    assert "replace k8s.io/api => k8s.io/api v0.33." in gomod and "v0.0.0" not in gomod
    # A second run finds everything built and calls no Go at all.
    (tmp_path / "calls").unlink()
    assert run(tmp_path, *kube, "kwok", "etcd")[0] == 0
    assert not (tmp_path / "calls").exists()


def test_a_failed_build_is_named_and_the_others_still_finish(tmp_path: Path) -> None:
    prom = "github.com/prometheus/prometheus/cmd/prometheus"
    rc, err, _ = run(tmp_path, "kwok", "prometheus", fail=prom)
    assert rc == 1
    assert re.search(rf"building prometheus failed: compile error in {prom}", err), err
    assert "1 of 2 builds failed" in err
    bins = next(p for p in (tmp_path / "cache" / "bin").iterdir() if p.name.startswith("k8s-"))
    assert {p.name for p in bins.iterdir()} == TOGETHER


def test_a_failed_module_build_names_its_members_and_log(tmp_path: Path) -> None:
    rc, err, _ = run(tmp_path, "kwok", fail="sigs.k8s.io/kwok/cmd/kwok")
    assert rc == 1
    said = r"building .*kwok.* failed: compile error in sigs.k8s.io/kwok.*; see .*cluster-build.log"
    assert re.search(said, err), err
    bins = next((tmp_path / "cache" / "bin").iterdir())
    assert not [p.name for p in bins.iterdir() if not p.name.startswith(".")]  # none half-built


def test_two_runs_that_want_one_tool_build_it_once(tmp_path: Path) -> None:
    # hack/realnode-up.sh starts the registry while the cluster's build also wants it.
    runs = [start(tmp_path, "registry", "kwok", sleep=0.5), start(tmp_path, "registry")]
    assert [p.wait(timeout=60) for p in runs] == [0, 0], [p.stderr.read() for p in runs]  # type: ignore[union-attr]
    calls = (tmp_path / "calls").read_text().splitlines()
    builds = [c for c in calls if c.split("|")[1].startswith("build")]
    assert sum("/src/registry-main-" in c.split("|")[0] for c in builds) == 1, calls


def test_the_real_nodes_binaries_are_the_ones_make_test_builds() -> None:
    mk = (TOP / "mk" / "test.mk").read_text()
    names = re.search(r"^REALNODE_BINARIES = (.+)$", mk, re.M)
    assert names and tuple(names.group(1).split()) == realnode.BINARIES

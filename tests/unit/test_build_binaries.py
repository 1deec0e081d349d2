"""hack/build-binaries.sh's plan: the Kubernetes commands from one resolution of their
modules and one `go build`, every other tool beside them, a failed build named while the
rest finish. The Go toolchain is replaced by a recorder here (a real cold build is minutes:
`make demo` on empty caches is where the builds themselves are exercised)."""

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
  build)
    out=
    while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2 ;; *) pkgs+=("$1"); shift ;; esac; done
    [[ "$out" == */ ]] || { mk "$out"; exit 0; }
    for p in "${pkgs[@]}"; do [[ "$p" != k8s.io/* ]] || mk "$out${p##*/}"; done ;;
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


def test_the_kubernetes_commands_resolve_once_and_build_in_one_go_build(tmp_path: Path) -> None:
    kube = ["kube-apiserver", "kubectl", *realnode.BINARIES[:2]]  # control plane + kubelet
    rc, err, calls = run(tmp_path, *kube, "kwok", "etcd")
    assert rc == 0, err
    kube_calls = [c for c in calls if "/src/kube-" in c.split("|")[0]]
    assert [c.split("|")[1].split()[0] for c in kube_calls] == ["get", "build"]
    built = kube_calls[1].split("|")[1]
    assert all(f"k8s.io/kubernetes/cmd/{c}" in built.split() for c in kube)
    bins = next((tmp_path / "cache" / "bin").iterdir())
    assert {p.name for p in bins.iterdir()} >= {*kube, "kwok", "etcd"}
    # A second run finds everything built and calls no Go at all.
    (tmp_path / "calls").unlink()
    assert run(tmp_path, *kube, "kwok", "etcd")[0] == 0
    assert not (tmp_path / "calls").exists()


def test_a_failed_build_is_named_and_the_others_still_finish(tmp_path: Path) -> None:
    rc, err, _ = run(tmp_path, "kwok", "helm", "coredns", fail="sigs.k8s.io/kwok/cmd/kwok")
    assert rc == 1
    assert re.search(r"building kwok failed: compile error in sigs.k8s.io/kwok", err), err
    assert "1 of 3 builds failed" in err
    bins = next((tmp_path / "cache" / "bin").iterdir())
    assert {p.name for p in bins.iterdir()} == {"helm", "coredns"}


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

#!/usr/bin/env python3
"""The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and KWOK as background processes, plus fake GPU nodes. Stdlib only, so `make cluster-up`
and the pytest fixture run the same code without the venv.

Usage: hack/cluster.py up|down|status|kubeconfig|registry|host-packages   (registry: the real
       node's image registry, host:port on 127.0.0.1, for `docker push` and the chart's
       images; host-packages: the Debian packages the real node and hack/images.sh need,
       installed in one apt-get run; registry-up: that registry alone, before the node)

Environment (all optional):
  DTJOB_CLUSTER_STATE      state dir (logs, pids, pki, etcd data, kubeconfig);
                           default $DTJOB_CACHE/cluster
  DTJOB_CLUSTER_PORT_BASE  first of the 127.0.0.1 ports used (default 16440): etcd +0,
                           etcd peer +1, apiserver +3, controller-manager +4, scheduler +5
  DTJOB_NODES, DTJOB_GPUS_PER_NODE, DTJOB_NODE_LABELS ("k=v,k2=v2"), DTJOB_NODE_CPU,
  DTJOB_NODE_MEMORY        the fake GPU nodes (default 4 x 8 nvidia.com/gpu, 64 cpu, 512Gi)
  DTJOB_BIN_DIR            use these binaries instead of building them
  DTJOB_CLUSTER_TIMEOUT    seconds to wait for each start-up step (default 60)
  DTJOB_NODE=real          `up` also starts the real node (hack/realnode.py, docs/real-node.md);
                           `down` always stops a real node it finds recorded
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_api
import cluster_pki
import realnode
import realnode_registry
from cluster_components import HACK, ClusterError, Config, command

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BINARIES = (*COMPONENTS, "kubectl")
FIXTURE_MARK = "started-by-pytest"  # see tests/integration/conftest.py


def bin_dir() -> Path:
    """The pinned binaries, built on first use (hack/build-binaries.sh caches them)."""
    if os.environ.get("DTJOB_BIN_DIR"):
        return Path(os.environ["DTJOB_BIN_DIR"])
    # With the real node, its binaries too, in the same run: one resolution of the Kubernetes
    # modules and one build of its commands (asked apart, a cold start resolved them twice).
    real = realnode.BINARIES if os.environ.get("DTJOB_NODE") == "real" else ()
    proc = subprocess.run(
        [str(HACK / "build-binaries.sh"), *BINARIES, *real], stdout=subprocess.PIPE, text=True
    )  # its stderr (progress, the one-line failure) goes straight to the user
    if proc.returncode != 0:
        raise ClusterError("building the cluster binaries failed (see the line above)")
    return Path(proc.stdout.strip().splitlines()[-1])


def running_pid(cfg: Config, name: str) -> int | None:
    """The recorded PID if that process is alive and still ours (guards against PID reuse)."""
    try:
        pid = int(cfg.pidfile(name).read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if Path(argv[0].decode()).name != name or str(cfg.state).encode() not in b"\0".join(argv):
        return None
    return pid


def start(cfg: Config, name: str, bins: Path) -> Popen[bytes]:
    cfg.log(name).parent.mkdir(parents=True, exist_ok=True)
    cfg.pidfile(name).parent.mkdir(parents=True, exist_ok=True)
    with cfg.log(name).open("wb") as log:
        # Own session: Ctrl-C in the terminal that ran cluster-up does not reach it.
        proc = Popen(
            command(cfg, name, bins), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
    cfg.pidfile(name).write_text(f"{proc.pid}\n")
    return proc


def stop(cfg: Config, names: tuple[str, ...] = COMPONENTS) -> list[str]:
    """SIGTERM the recorded processes (dependents first), SIGKILL what outlives 10 s."""
    pids = {n: pid for n in reversed(names) if (pid := running_pid(cfg, n))}
    for pid in pids.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for name, pid in pids.items():
        while running_pid(cfg, name) and time.monotonic() < deadline:
            time.sleep(0.05)
        if running_pid(cfg, name):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    for name in names:
        while running_pid(cfg, name):  # a killed process is gone once its parent reaps it
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} (pid {pids[name]}) survived SIGKILL; stop it by hand")
            time.sleep(0.05)
        cfg.pidfile(name).unlink(missing_ok=True)
    return list(pids)


def check_ports_free(cfg: Config) -> None:
    for owner, port in cfg.ports.items():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                raise ClusterError(
                    f"port 127.0.0.1:{port} (for {owner}) is in use; free it or set "
                    "DTJOB_CLUSTER_PORT_BASE to another range"
                ) from None


def wait(
    cfg: Config, what: str, ok: Callable[[], bool], procs: dict[str, Popen[bytes]], log: str
) -> None:
    """Poll ok() until true; fail fast, naming the log, if a started component exits."""
    deadline = time.monotonic() + cfg.timeout
    while not ok():
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with code {proc.returncode} during start-up; "
                    f"see {cfg.log(name)}"
                )
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} not reached after {cfg.timeout:.0f} s; see {log}")
        time.sleep(0.1)


def create_nodes(cfg: Config, api: cluster_api.Api) -> list[str]:
    names = [f"dtjob-gpu-{i}" for i in range(cfg.nodes)]
    for name in names:
        node = cluster_api.gpu_node(name, cfg.gpus, cfg.labels, cfg.cpu, cfg.memory)
        try:
            api.create("/api/v1/nodes", node)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            raise ClusterError(f"creating node {name} was refused ({e.code}): {detail}") from e
    return names


def nodes_ready(api: cluster_api.Api, names: list[str]) -> bool:
    try:
        items = api.request("GET", "/api/v1/nodes")["items"]
    except (OSError, urllib.error.URLError):
        return False
    ready = {n["metadata"]["name"] for n in items if cluster_api.node_is_ready(n)}
    return set(names) <= ready


def up(cfg: Config) -> None:
    t0 = time.monotonic()
    if not os.environ.get("DTJOB_CLUSTER_BY_FIXTURE"):
        # Started or adopted by hand: test sessions must not stop it when they finish.
        (cfg.state / FIXTURE_MARK).unlink(missing_ok=True)
    bins = bin_dir()
    api = cluster_api.Api(cfg.server, cfg.pki) if (cfg.pki / "admin.crt").exists() else None
    alive = [n for n in COMPONENTS if running_pid(cfg, n)]
    procs: dict[str, Popen[bytes]] = {}
    if len(alive) == len(COMPONENTS) and api and api.ready():
        print(f"cluster-up: already running (state {cfg.state})", file=sys.stderr)
    else:
        if alive:  # a half-running cluster: start over rather than guess
            print(f"cluster-up: restarting partial cluster ({', '.join(alive)})", file=sys.stderr)
            stop(cfg)
        procs = start_all(cfg, bins)
        api = cluster_api.Api(cfg.server, cfg.pki)
    try:
        names = create_nodes(cfg, api)
        logs = f"{cfg.log('kwok')} and {cfg.log('kube-controller-manager')}"
        wait(cfg, f"{cfg.nodes} Ready GPU nodes", lambda: nodes_ready(api, names), procs, logs)
    except BaseException:
        if procs:  # only undo what this run started
            stop(cfg)
        raise
    if os.environ.get("DTJOB_NODE") == "real":
        realnode.up(cfg, api)
    print(
        f"cluster-up: {cfg.nodes} nodes x {cfg.gpus} nvidia.com/gpu Ready in "
        f"{time.monotonic() - t0:.1f} s; KUBECONFIG={cfg.kubeconfig}",
        file=sys.stderr,
    )


def start_all(cfg: Config, bins: Path) -> dict[str, Popen[bytes]]:
    check_ports_free(cfg)
    try:
        cluster_pki.ensure_pki(cfg.pki)
    except cluster_pki.PkiError as e:
        raise ClusterError(f"generating certificates in {cfg.pki}: {e}") from e
    for user in ("admin", "kube-controller-manager", "kube-scheduler"):
        path = cfg.kubeconfig if user == "admin" else cfg.state / f"{user}.kubeconfig"
        cluster_pki.write_kubeconfig(path, cfg.pki, user, cfg.server)
    # A fresh store each time: tests must not inherit objects from an earlier run.
    shutil.rmtree(cfg.state / "etcd", ignore_errors=True)
    cfg.state.joinpath("bin-dir").write_text(f"{bins}\n")
    procs: dict[str, Popen[bytes]] = {}
    api = cluster_api.Api(cfg.server, cfg.pki)
    t0 = time.monotonic()
    try:
        # The apiserver retries etcd itself, so both start together.
        for name in ("etcd", "kube-apiserver"):
            procs[name] = start(cfg, name, bins)
        wait(cfg, "kube-apiserver /readyz", api.ready, procs, str(cfg.log("kube-apiserver")))
        print(f"cluster-up: kube-apiserver ready in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            procs[name] = start(cfg, name, bins)
    except BaseException:
        stop(cfg)
        raise
    return procs


def down(cfg: Config) -> None:
    realnode.down(cfg)  # while the apiserver still runs: kubelet first
    stopped = stop(cfg)
    shutil.rmtree(cfg.state / "etcd", ignore_errors=True)
    print(f"cluster-down: stopped {', '.join(stopped) or 'nothing (not running)'}", file=sys.stderr)


def status(cfg: Config) -> int:
    api = cluster_api.Api(cfg.server, cfg.pki) if (cfg.pki / "admin.crt").exists() else None
    running = 0
    for name in COMPONENTS:
        pid = running_pid(cfg, name)
        running += bool(pid)
        state = f"running (pid {pid})" if pid else "stopped"
        print(f"{name:24} {state:20} log {cfg.log(name)}")
    realnode.status(cfg)
    if api and api.ready():
        items = api.request("GET", "/api/v1/nodes")["items"]
        ready = sum(cluster_api.node_is_ready(n) for n in items)
        print(f"apiserver {cfg.server} ready; nodes {ready}/{len(items)} Ready")
        print(f"KUBECONFIG={cfg.kubeconfig}")
    return 0 if running == len(COMPONENTS) else 1


def external_kubeconfig() -> str | None:
    """DTJOB_KUBECONFIG names a cluster someone else runs; then nothing local is started.

    A dedicated variable, not KUBECONFIG, so an ambient production context is never used
    by accident.
    """
    path = os.environ.get("DTJOB_KUBECONFIG")
    if path and not Path(path).is_file():
        raise ClusterError(f"DTJOB_KUBECONFIG={path} does not exist")
    return path


def main(argv: list[str]) -> int:
    verbs = ("up", "down", "status", "kubeconfig", "registry", "host-packages", "registry-up")
    if len(argv) != 2 or argv[1] not in verbs:
        print(__doc__, file=sys.stderr)
        return 2
    verb = argv[1]
    try:
        cfg = Config.from_env()
        if external := external_kubeconfig():
            if verb == "kubeconfig":
                print(Path(external).resolve())
            else:
                print(f"cluster-{verb}: DTJOB_KUBECONFIG is set; using {external}", file=sys.stderr)
            return 0
        if verb == "kubeconfig":
            print(cfg.kubeconfig)
            return 0
        if verb == "registry":
            print(realnode_registry.address(cfg))
            return 0
        if verb == "status":
            return status(cfg)
        if verb == "host-packages":
            realnode.install_packages(cfg, realnode.PACKAGES + realnode.IMAGE_PACKAGES)
            return 0
        cfg.state.mkdir(parents=True, exist_ok=True)
        if verb == "registry-up":  # not behind the cluster's lock, which a cold `up` holds
            realnode.registry_up(cfg)  # while it builds: it has one of its own
            return 0
        # One cluster per state dir even when two shells (or test sessions) race.
        with open(cfg.state / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            up(cfg) if verb == "up" else down(cfg)
        return 0
    except ClusterError as e:
        print(f"cluster-{verb}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv))

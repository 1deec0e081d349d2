"""One REAL node for the local cluster (test tier 3): containerd + runc + CNI bridge from
Debian, kubelet and kube-proxy (iptables mode) built from Go modules at the pinned Kubernetes
version, and CoreDNS on the host. hack/cluster.py calls up()/down(); see docs/real-node.md.

Networking, all on this machine: a Linux bridge `dtjob<N>` with the pod subnet
10.244.<N>.0/24 and the host address 10.244.<N>.1 (the node's InternalIP, kubelet's listener,
CoreDNS's listener and the pods' nameserver). The apiserver keeps listening on 127.0.0.1
only; pods reach it through kube-proxy's ClusterIP 10.96.0.1 -> the `kubernetes` Endpoints
(<bridge address>:<apiserver port>) -> a small TCP forwarder on that address to 127.0.0.1.

Images: a registry (distribution, built from Go modules) on 127.0.0.1:<port base + 14>,
storage under $DTJOB_CACHE/registry; hack/images.sh pushes to it and containerd pulls from it
over plain http (hosts.toml), as a user's cluster pulls from theirs. Only the pause image is
imported (the node's own sandbox image, like kubeadm's).

Everything started is recorded under <state>/realnode (pids, iptables rules, sysctls) and
down() removes exactly that: containers, network namespaces, mounts, rules, the bridge.
Only one real node per host: kube-proxy's iptables chains are host-wide.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from subprocess import Popen

import cluster_api
import cluster_pki
import realnode_registry
from cluster_components import HACK, ClusterError, Config, cache_dir

NODE = "dtjob-real-0"
TAINT_KEY = "dtjob.io/node"  # label and NoSchedule taint dtjob.io/node=real
COMPONENTS = ("registry", "containerd", "apiserver-forwarder", "coredns", "kube-proxy", "kubelet")
BINARIES = ("kubelet", "kube-proxy", "coredns", "registry")  # hack/build-binaries.sh's names
PACKAGES = (
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "iproute2",
    "conntrack",
)
# What hack/images.sh needs (Docker Engine, the base image's debootstrap, curl). Installed
# with PACKAGES in one apt-get run before hack/realnode-up.sh builds the images beside the
# cluster: two apt-gets side by side fail on dpkg's lock.
IMAGE_PACKAGES = ("docker.io", "debootstrap", "curl")
CNI_BIN = "/usr/lib/cni"
SANDBOX_IMAGE = "docker.io/dtjob/pause:3.10"
OWNER = Path("/run/dtjob-realnode.owner")  # the state dir of the host's one real node
SYSCTLS = {"net.bridge.bridge-nf-call-iptables": "1"}


class Net:
    """Per-instance names and addresses, derived from the port base so two instances differ."""

    def __init__(self, cfg: Config) -> None:
        n = (cfg.port_base // 10) % 250
        self.bridge = f"dtjob{n}"
        self.subnet = f"10.244.{n}.0/24"
        self.host_ip = f"10.244.{n}.1"
        self.kubelet_port = cfg.port_base + 10
        self.ports = {"kubelet-healthz": cfg.port_base + 11, "proxy-metrics": cfg.port_base + 12,
                      "proxy-healthz": cfg.port_base + 13}  # fmt: skip
        self.registry = realnode_registry.address(cfg)


def rdir(cfg: Config) -> Path:
    return cfg.state / "realnode"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(args, capture_output=True, text=True)
    except FileNotFoundError:
        raise ClusterError(f"real node: {args[0]} is not installed") from None
    if check and proc.returncode != 0:
        raise ClusterError(f"real node: `{' '.join(args)}` failed: {proc.stderr.strip()[-300:]}")
    return proc


def install_packages(cfg: Config, packages: tuple[str, ...]) -> None:
    """The Debian packages not yet installed, in one apt-get run (root)."""
    missing = [p for p in packages if sh("dpkg", "-s", p, check=False).returncode != 0]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ClusterError(f"missing Debian packages: {' '.join(missing)} (install them as root)")
    log = cfg.log("realnode-apt")
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"cluster-up: installing {' '.join(missing)} (log {log})", file=sys.stderr)
    with log.open("w") as out:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        ok = subprocess.run(["apt-get", "update", "-qq"], stdout=out, stderr=out).returncode == 0
        ok = ok and subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            stdout=out, stderr=out, env=env,
        ).returncode == 0  # fmt: skip
    if not ok:
        raise ClusterError(f"real node: apt-get install {' '.join(missing)} failed; see {log}")


def ensure_host(cfg: Config) -> None:
    """Debian packages and kernel features; one clear line when something is missing."""
    install_packages(cfg, PACKAGES)
    for mod in ("br_netfilter", "overlay"):
        if shutil.which("modprobe"):  # built in, or already loaded, on many kernels
            sh("modprobe", mod, check=False)
    if not Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        raise ClusterError(
            "real node: kernel feature br_netfilter is missing "
            "(/proc/sys/net/bridge absent; modprobe br_netfilter failed)"
        )
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise ClusterError("real node: kernel feature overlayfs is missing (containerd needs it)")


def claim_host(cfg: Config) -> None:
    if OWNER.exists():
        other = OWNER.read_text().strip()
        if other != str(cfg.state) and any(running(Path(other), n) for n in COMPONENTS):
            raise ClusterError(
                f"real node: the cluster in {other} already runs this host's real "
                "node (kube-proxy's iptables are host-wide); stop it first"
            )
    OWNER.write_text(f"{cfg.state}\n")


def running(state: Path, name: str) -> int | None:
    try:
        pid = int((state / "realnode" / "pids" / f"{name}.pid").read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if str(state).encode() in argv else None


def write_configs(cfg: Config, net: Net, cache: Path) -> None:
    rd = rdir(cfg)
    for d in ("cni", "pids", "kubelet", "containerd-state", f"certs.d/{net.registry}"):
        (rd / d).mkdir(parents=True, exist_ok=True)
    pki = cfg.pki
    # The node and kube-proxy identities the bootstrap RBAC knows (Node authorizer,
    # system:node-proxier); CoreDNS reads as admin.
    for name, subj in (("node", f"/O=system:nodes/CN=system:node:{NODE}"),
                       ("kube-proxy", "/CN=system:kube-proxy")):  # fmt: skip
        if not (pki / f"{name}.crt").exists():
            cluster_pki._signed_cert(
                pki,
                name,
                subj,
                "basicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
            )
    for name in ("node", "kube-proxy"):
        cluster_pki.write_kubeconfig(rd / f"{name}.kubeconfig", pki, name, cfg.server)
    (cache / "containerd").mkdir(parents=True, exist_ok=True)
    realnode_registry.write_configs(rdir(cfg), net.registry, cache)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    (rd / "containerd.toml").write_text(f"""version = 2
# Images persist in the cache (pulled once); runtime state lives in the cluster state dir.
root = "{cache / "containerd"}"
state = "{rd / "containerd-state"}"
[grpc]
  address = "{rd / "containerd.sock"}"
[{cri}]
  sandbox_image = "{SANDBOX_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Negative oom_score_adj (-998 for sandboxes) is refused on this kind of machine and runc
  # fails with "can't get final child's PID from pipe"; clamp to containerd's own value.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    # A pulled layer is kept once, unpacked: the registry sends the layers uncompressed
    # (hack/oci_push.py), and with their blobs kept too the trainer took 5 GB twice.
    discard_unpacked_layers = true
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [{cri}.registry]
    config_path = "{rd / "certs.d"}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{rd / "cni"}"
""")
    (rd / "cni" / "10-dtjob.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "dtjob",
        "plugins": [
            {"type": "bridge", "bridge": net.bridge, "isGateway": True, "ipMasq": False,
             "isDefaultGateway": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": net.subnet,
                                                         "gateway": net.host_ip}]],
                      "dataDir": str(rd / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2))  # fmt: skip
    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": net.host_ip, "port": net.kubelet_port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": net.ports["kubelet-healthz"],
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "AlwaysAllow"},  # only x509 clients of our CA get in
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{rd / 'containerd.sock'}",
        "clusterDNS": [net.host_ip], "clusterDomain": "cluster.local", "resolvConf": "",
        "registerWithTaints": [{"key": TAINT_KEY, "value": "real", "effect": "NoSchedule"}],
        # Never garbage-collect images: the pause image is imported (no registry has it), and
        # pulling the multi-GB trainer again after a collection would stall a job for minutes.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%"},
        "podCIDR": net.subnet, "maxPods": 30, "serializeImagePulls": False,
        "cgroupsPerQOS": True, "enforceNodeAllocatable": ["pods"],
    }  # fmt: skip
    (rd / "kubelet.json").write_text(json.dumps(kubelet, indent=2))
    proxy = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "hostnameOverride": NODE, "clusterCIDR": net.subnet,
        "bindAddress": net.host_ip,
        "metricsBindAddress": f"127.0.0.1:{net.ports['proxy-metrics']}",
        "healthzBindAddress": f"127.0.0.1:{net.ports['proxy-healthz']}",
        "clientConnection": {"kubeconfig": str(rd / "kube-proxy.kubeconfig")},
        # Leave host-wide sysctls alone: no conntrack sizing, no route_localnet.
        "conntrack": {"maxPerCore": 0},
        "iptables": {"localhostNodePorts": False},
    }  # fmt: skip
    (rd / "kube-proxy.json").write_text(json.dumps(proxy, indent=2))
    (rd / "Corefile").write_text(f"""cluster.local:53 {{
    bind {net.host_ip}
    errors
    kubernetes cluster.local {{
        kubeconfig {cfg.kubeconfig} dtjob-local
        pods insecure
    }}
}}
.:53 {{
    bind {net.host_ip}
    # Nothing outside the cluster is resolved: only our own pods talk to each other.
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
""")


def command(cfg: Config, net: Net, name: str, bins: Path) -> list[str]:
    rd = rdir(cfg)
    if name == "registry":
        return [str(bins / "registry"), "serve", str(rd / "registry.yml")]
    if name == "containerd":
        return ["containerd", f"--config={rd / 'containerd.toml'}"]
    if name == "apiserver-forwarder":
        port = cfg.ports["kube-apiserver"]
        return [sys.executable, str(HACK / "realnode_forward.py"), f"{net.host_ip}:{port}",
                f"127.0.0.1:{port}", str(cfg.state)]  # fmt: skip
    if name == "coredns":
        return [str(bins / "coredns"), "-conf", str(rd / "Corefile")]
    if name == "kube-proxy":
        return [str(bins / "kube-proxy"), f"--config={rd / 'kube-proxy.json'}"]
    if name == "kubelet":
        return [
            str(bins / "kubelet"), f"--config={rd / 'kubelet.json'}",
            f"--kubeconfig={rd / 'node.kubeconfig'}", f"--root-dir={rd / 'kubelet'}",
            f"--cert-dir={rd / 'kubelet-pki'}", f"--hostname-override={NODE}",
            f"--node-ip={net.host_ip}", f"--node-labels={TAINT_KEY}=real",
        ]  # fmt: skip
    raise ValueError(name)


def start(cfg: Config, net: Net, name: str, bins: Path) -> Popen[bytes]:
    with cfg.log(name).open("wb") as log:
        proc = Popen(command(cfg, net, name, bins), stdin=subprocess.DEVNULL, stdout=log,
                     stderr=log, start_new_session=True, cwd=rdir(cfg))  # fmt: skip
    (rdir(cfg) / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc


def setup_network(cfg: Config, net: Net) -> None:
    rd = rdir(cfg)
    if sh("ip", "link", "show", net.bridge, check=False).returncode != 0:
        sh("ip", "link", "add", net.bridge, "type", "bridge")
    sh("ip", "addr", "replace", f"{net.host_ip}/24", "dev", net.bridge)
    sh("ip", "link", "set", net.bridge, "up")
    saved = rd / "sysctls.json"
    if not saved.exists():  # the host's values before us, restored by down()
        old = {k: sh("sysctl", "-n", k).stdout.strip() for k in SYSCTLS}
        saved.write_text(json.dumps(old))
    for k, v in SYSCTLS.items():
        sh("sysctl", "-q", "-w", f"{k}={v}")
    # Bridged pod traffic passes the FORWARD chain (br_netfilter); a Docker Engine elsewhere
    # may have set its policy to DROP. Accept our bridge's traffic, nothing else.
    rules = [["FORWARD", "-i", net.bridge, "-j", "ACCEPT"],
             ["FORWARD", "-o", net.bridge, "-j", "ACCEPT"]]  # fmt: skip
    for r in rules:
        tagged = [*r[1:], "-m", "comment", "--comment", f"dtjob-realnode {cfg.state}"]
        if sh("iptables", "-C", r[0], *tagged, check=False).returncode != 0:
            sh("iptables", "-I", r[0], *tagged)
    (rd / "iptables.json").write_text(json.dumps(rules))


def publish_apiserver(cfg: Config, net: Net, api: cluster_api.Api) -> None:
    """The `kubernetes` Endpoints (the apiserver runs with --endpoint-reconciler-type=none):
    the bridge address, where the forwarder listens. KCM mirrors it into an EndpointSlice."""
    eps = {"apiVersion": "v1", "kind": "Endpoints",
           "metadata": {"name": "kubernetes", "namespace": "default"},
           "subsets": [{"addresses": [{"ip": net.host_ip}],
                        "ports": [{"name": "https", "port": cfg.ports["kube-apiserver"],
                                   "protocol": "TCP"}]}]}  # fmt: skip
    try:
        api.request("PUT", "/api/v1/namespaces/default/endpoints/kubernetes", eps)
    except urllib.error.HTTPError as e:
        if e.code != 404:
            detail = e.read()[:200].decode(errors="replace")
            raise ClusterError(f"real node: writing the kubernetes Endpoints: {detail}") from e
        api.create("/api/v1/namespaces/default/endpoints", eps)


def node_ready(api: cluster_api.Api) -> bool:
    try:
        return cluster_api.node_is_ready(api.request("GET", f"/api/v1/nodes/{NODE}"))
    except (OSError, urllib.error.URLError):
        return False


def build_binaries(names: tuple[str, ...] = BINARIES) -> Path:
    proc = subprocess.run(
        [str(HACK / "build-binaries.sh"), *names],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise ClusterError("building the real node's binaries failed (see the line above)")
    return Path(proc.stdout.strip().splitlines()[-1])


def registry_up(cfg: Config) -> None:
    """The registry alone, ahead of the node (`hack/cluster.py registry-up`): a cold
    hack/realnode-up.sh pushes the images while the cluster's binaries still build, instead
    of after them. up() keeps it running; down() stops it with the rest."""
    net = Net(cfg)
    if not (running(cfg.state, "registry") and realnode_registry.ready(net.registry)):
        ensure_registry(cfg, net, build_binaries(("registry",)))


def ensure_registry(cfg: Config, net: Net, bins: Path) -> None:
    """Start the registry unless it runs; registry_up() and up() may race (one lock)."""
    rd = rdir(cfg)
    for d in ("pids", f"certs.d/{net.registry}"):
        (rd / d).mkdir(parents=True, exist_ok=True)
    cfg.log("registry").parent.mkdir(parents=True, exist_ok=True)
    with open(rd / ".registry.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs: dict[str, Popen[bytes]] = {}
        if not running(cfg.state, "registry"):
            realnode_registry.write_configs(rd, net.registry, cache_dir())
            procs["registry"] = start(cfg, net, "registry", bins)
        wait(cfg, f"registry {net.registry}", lambda: realnode_registry.ready(net.registry), procs)


def up(cfg: Config, api: cluster_api.Api) -> None:
    t0 = time.monotonic()
    cache = cache_dir()
    net = Net(cfg)
    if all(running(cfg.state, n) for n in COMPONENTS) and node_ready(api):
        print(f"cluster-up: real node {NODE} already running", file=sys.stderr)
        return
    if os.geteuid() != 0:
        raise ClusterError("real node: needs root (containerd, CNI, iptables, mounts)")
    ensure_host(cfg)
    bins = build_binaries()
    # A half-running node: start clean, but for what serves a build or push that may be
    # under way beside this (hack/realnode-up.sh): the registry and the Docker Engine.
    down(cfg, quiet=True, node_only=True)
    claim_host(cfg)
    write_configs(cfg, net, cache)
    setup_network(cfg, net)
    procs: dict[str, Popen[bytes]] = {}
    try:
        procs["containerd"] = start(cfg, net, "containerd", bins)
        ensure_registry(cfg, net, bins)
        sock = rdir(cfg) / "containerd.sock"
        wait(cfg, "containerd socket", sock.exists, procs)
        ensure_images(cfg, sock)
        publish_apiserver(cfg, net, api)
        for name in ("apiserver-forwarder", "coredns", "kube-proxy", "kubelet"):
            procs[name] = start(cfg, net, name, bins)
        wait(cfg, f"real node {NODE} Ready", lambda: node_ready(api), procs)
    except BaseException:
        down(cfg, quiet=True)
        raise
    print(f"cluster-up: real node {NODE} Ready in {time.monotonic() - t0:.1f} s (pods "
          f"{net.subnet} on {net.bridge}, registry {net.registry})", file=sys.stderr)  # fmt: skip


def ensure_images(cfg: Config, sock: Path) -> None:
    """The pause image in containerd; ours come from the registry (hack/images.sh push)."""
    log = cfg.log("realnode-images")
    env = {**os.environ, "CONTAINERD_SOCK": str(sock)}
    with log.open("w") as out:
        rc = subprocess.run([str(HACK / "images.sh"), "node"], env=env, stdout=out,
                            stderr=out).returncode  # fmt: skip
    if rc != 0:
        last = (log.read_text().strip().splitlines() or [""])[-1]
        raise ClusterError(f"real node: images failed: {last}")


def wait(cfg: Config, what: str, ok: object, procs: dict[str, Popen[bytes]]) -> None:
    deadline = time.monotonic() + max(cfg.timeout, 120)
    while not ok():  # type: ignore[operator]
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"real node: {name} exited with code {proc.returncode} "
                    f"during start-up; see {cfg.log(name)}"
                )
        if time.monotonic() > deadline:
            logs = ", ".join(str(cfg.log(n)) for n in procs)
            raise ClusterError(f"real node: {what} not reached in time; see {logs}")
        time.sleep(0.5)


def down(cfg: Config, quiet: bool = False, node_only: bool = False) -> list[str]:
    """Stop what up() recorded, then remove containers, netns, mounts, rules and the bridge;
    with node_only, the registry and the Docker Engine keep running."""
    rd = rdir(cfg)
    if not rd.exists():
        return []
    stopped = []
    sock = rd / "containerd.sock"
    beside = () if node_only else ("registry",)
    for name in ("kubelet", "kube-proxy", "coredns", "apiserver-forwarder", *beside):
        if stop_one(cfg, name):
            stopped.append(name)
    if running(cfg.state, "containerd"):
        remove_containers(sock)
    if stop_one(cfg, "containerd"):
        stopped.append("containerd")
    kill_shims(rd)
    unmount_under(rd)
    bins = (cfg.state / "bin-dir").read_text().strip() if (cfg.state / "bin-dir").exists() else ""
    if stopped and Path(bins, "kube-proxy").exists():
        sh(str(Path(bins, "kube-proxy")), "--cleanup", check=False)  # its iptables chains
    rules = (
        json.loads((rd / "iptables.json").read_text()) if (rd / "iptables.json").exists() else []
    )
    for r in rules:
        tagged = [*r[1:], "-m", "comment", "--comment", f"dtjob-realnode {cfg.state}"]
        while sh("iptables", "-D", r[0], *tagged, check=False).returncode == 0:
            pass
    (rd / "iptables.json").unlink(missing_ok=True)
    if (rd / "sysctls.json").exists():
        for k, v in json.loads((rd / "sysctls.json").read_text()).items():
            sh("sysctl", "-q", "-w", f"{k}={v}", check=False)
        (rd / "sysctls.json").unlink()
    net = Net(cfg)
    sh("ip", "link", "del", net.bridge, check=False)
    sh(
        "rm",
        "-rf",
        str(rd / "ipam"),
        str(rd / "kubelet"),
        str(rd / "containerd-state"),
        check=False,
    )
    if OWNER.exists() and OWNER.read_text().strip() == str(cfg.state):
        OWNER.unlink()
    # The Docker Engine hack/images.sh started (it only stops the one it recorded).
    if not node_only:
        subprocess.run([str(HACK / "images.sh"), "stop"], check=False)
    if stopped and not quiet:
        print(f"cluster-down: real node stopped ({', '.join(stopped)})", file=sys.stderr)
    return stopped


def stop_one(cfg: Config, name: str) -> bool:
    pid = running(cfg.state, name)
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while running(cfg.state, name) and time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if running(cfg.state, name):
        os.kill(pid, signal.SIGKILL)
    (rdir(cfg) / "pids" / f"{name}.pid").unlink(missing_ok=True)
    return True


def remove_containers(sock: Path) -> None:
    """Through CRI would be kinder, but ctr is what Debian ships: kill every task of our
    containerd, then delete the containers (the sandboxes' netns go with unmount_under)."""
    ctr = ["ctr", "-a", str(sock), "-n", "k8s.io"]
    ids = sh(*ctr, "containers", "ls", "-q", check=False).stdout.split()
    for cid in ids:
        sh(*ctr, "tasks", "kill", "-s", "SIGKILL", cid, check=False)
    time.sleep(1)
    for cid in ids:
        sh(*ctr, "tasks", "delete", "-f", cid, check=False)
        sh(*ctr, "containers", "delete", cid, check=False)


def kill_shims(rd: Path) -> None:
    """containerd-shim processes outlive containerd; ours name our state dir in argv."""
    for p in Path("/proc").glob("[0-9]*"):
        try:
            argv = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in argv.split(b"\0")[0] and str(rd).encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(p.name), signal.SIGKILL)


def unmount_under(rd: Path) -> None:
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(str(rd) + "/")), reverse=True):
        sh("umount", "-l", m, check=False)


def status(cfg: Config) -> None:
    if not rdir(cfg).exists():
        return
    for name in COMPONENTS:
        pid = running(cfg.state, name)
        state = f"running (pid {pid})" if pid else "stopped"
        print(f"{name:24} {state:20} log {cfg.log(name)}")

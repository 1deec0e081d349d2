#!/usr/bin/env bash
# Builds the local cluster's binaries from Go modules at the versions pinned in
# hack/versions.env, into a cache directory keyed by those versions. A second run
# with the same pins rebuilds nothing. Prints the bin directory on success.
#
# Usage: hack/build-binaries.sh [component ...]   (default: every component but
#        kubeflow-training-operator, which only bench/operator_scale.py asks for)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${DTJOB_CACHE:-$HOME/.cache/dtjob}
key="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_coredns-${COREDNS_VERSION}"
bin_dir="$cache_root/bin/$key"
log_dir="$cache_root/build-logs"
mkdir -p "$bin_dir" "$log_dir" "$cache_root/src"

kube_components=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
# Built together from one Go module (build_together, below): everything that links
# Kubernetes' client libraries and builds with Kubernetes' own versions of them.
together=("${kube_components[@]}" etcd kwok helm coredns)
all=("${together[@]}" prometheus promtool registry kueue)
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${all[@]}")

die() { echo "build-binaries: $*" >&2; exit 1; }
# One line a user can act on: what failed, the tool's own last words, and the full log.
die_log() {  # what log
  local last
  last=$(grep -v '^\s*$' "$2" 2>/dev/null | tail -n 1 | cut -c1-200)
  die "$1 failed${last:+: $last}; see $2"
}
command -v go >/dev/null || die "no Go toolchain on PATH; install Go >= 1.24 (https://go.dev/dl) and retry"

# Prometheus and the registry are keyed by their own versions, each in a directory of its own
# linked into bin_dir: a new pin builds that tool again without touching the cached
# Kubernetes binaries.
prom_dir="$cache_root/bin/prometheus-$PROMETHEUS_VERSION"
reg_dir="$cache_root/bin/registry-$REGISTRY_VERSION"
kueue_dir="$cache_root/bin/kueue-$KUEUE_VERSION"
kfto_dir="$cache_root/bin/kubeflow-training-operator-$KUBEFLOW_TRAINING_OPERATOR_VERSION"
built_at() {  # component -> where its built binary lives
  case "$1" in
    prometheus | promtool) echo "$prom_dir/$1" ;;
    registry) echo "$reg_dir/$1" ;;
    kueue) echo "$kueue_dir/$1" ;;
    kubeflow-training-operator) echo "$kfto_dir/$1" ;;
    *) echo "$bin_dir/$1" ;;
  esac
}
link_own_versions() {
  local c
  for c in prometheus promtool registry kueue kubeflow-training-operator; do
    [ ! -x "$(built_at "$c")" ] || ln -sfn "$(built_at "$c")" "$bin_dir/$c"
  done
}

missing=()
for c in "${wanted[@]}"; do [ -x "$(built_at "$c")" ] || missing+=("$c"); done
if [ ${#missing[@]} -eq 0 ]; then link_own_versions; echo "$bin_dir"; exit 0; fi

# No DWARF from the compiler: the links strip it anyway (-ldflags -w), and making it cost a
# cold build of kwok 13 % of its CPU (377 -> 327 CPU-s here; same binary size).
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
staging_version="v0.${KUBE_VERSION#v1.}"
# Staging modules published for 1.32+: see k8s.io/kubernetes/staging/src/k8s.io.
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver)

# The Kubernetes commands, etcd, kwok, Helm and CoreDNS (our main, hack/gomain/coredns), all
# from ONE Go module and ONE `go build`: each dependency they share (client-go and the API
# types, gRPC, protobuf, OpenTelemetry, Prometheus' client) is at one version, and Go
# compiles each package once for all of them. Built from a module each, as before, the same
# libraries at slightly different versions were compiled four or five times (figures:
# docs/real-node.md, "Where a cold set-up goes"). Kubernetes' versions win: every module its
# release's go.mod requires is replaced by that version (the staging modules by the
# release's), so the Kubernetes commands are built exactly as from their own module, and
# the other tools against Kubernetes' libraries; left to minimal version selection, the
# others' newer requirements had moved 37 of Kubernetes' dependencies (gRPC, CEL, etcd's
# client among them). The registry stays apart: its module needs an OpenTelemetry newer than
# Kubernetes 1.33 compiles with.
# Every missing member is built, not only those asked for: a cold set-up wants them all
# (hack/realnode-up.sh asks for Helm beside the cluster's build), and one build costs little
# more than its largest member.
build_together() {  # components
  local mod="$cache_root/src/cluster-$key" comps=("$@") c
  mkdir -p "$mod/coredns"
  if [ ! -f "$mod/go.mod" ]; then
    {
      echo "module dtjob.local/clusterbuild"
      echo
      echo "go 1.24.0"
      echo
      echo "godebug default=go1.24"
      echo
      for s in "${staging[@]}"; do echo "replace k8s.io/$s => k8s.io/$s $staging_version"; done
    } >"$mod/go.mod.tmp"
    # kube_pins runs `go` in the module (go.mod without the pins), then the pins are added;
    # a failure leaves no go.mod, so the next run does not build without them.
    if ! (cd "$mod" && cp go.mod.tmp go.mod && kube_pins >>go.mod.tmp && mv go.mod.tmp go.mod) \
      2>"$log_dir/cluster-modules.log"; then
      rm -f "$mod/go.mod"
      die_log "reading k8s.io/kubernetes $KUBE_VERSION's go.mod" "$log_dir/cluster-modules.log"
    fi
  fi
  cp "$here/gomain/coredns/main.go" "$mod/coredns/main.go"
  # `go get` of the command packages (not just the modules) records every dependency they
  # need in go.mod/go.sum; a blank tools.go cannot import main packages, and `go mod tidy`
  # would drop the requirement again. Cheap when already recorded.
  local gets=(
    "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "github.com/coredns/coredns@$COREDNS_VERSION"
  )
  for c in "${kube_components[@]}"; do gets+=("k8s.io/kubernetes/cmd/$c@$KUBE_VERSION"); done
  echo "build-binaries: resolving modules for ${together[*]} (log: $log_dir/cluster-modules.log)" >&2
  (cd "$mod" && go get "${gets[@]}") >"$log_dir/cluster-modules.log" 2>&1 \
    || die_log "downloading Go modules for ${together[*]}" "$log_dir/cluster-modules.log"
  local pkgs=()
  for c in "${comps[@]}"; do pkgs+=("$(package_of "$c")"); done
  local pkg="k8s.io/component-base/version" cgo="k8s.io/client-go/pkg/version"
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for p in $pkg $cgo; do
    ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  # One `go build` of every wanted command: Go schedules their packages' compiles and the
  # links together (separate builds linked one binary at a time, each alone on the cores).
  local out="$bin_dir/.together-build"
  rm -rf "$out" && mkdir -p "$out"
  echo "build-binaries: building ${comps[*]} (log: $log_dir/cluster-build.log)" >&2
  (cd "$mod" && GOFLAGS="$GOFLAGS -mod=mod" go build -trimpath -ldflags "$ld" -o "$out/" "${pkgs[@]}") \
    >"$log_dir/cluster-build.log" 2>&1 || die_log "building ${comps[*]}" "$log_dir/cluster-build.log"
  # `go build -o dir/` names each binary after its package's last element, a major version
  # suffix left out: etcd's (go.etcd.io/etcd/server/v3) is server.
  local p
  for c in "${comps[@]}"; do
    p=$(package_of "$c")
    [[ ! "$p" =~ /v[0-9]+$ ]] || p=${p%/*}
    mv "$out/${p##*/}" "$bin_dir/$c"
  done
  rm -rf "$out"
}

# `replace M => M v` for each module k8s.io/kubernetes's go.mod requires (bar the staging
# modules, replaced above). Run in the module's directory.
kube_pins() {
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -s "$gomod" ] || { echo "no go.mod downloaded for k8s.io/kubernetes@$KUBE_VERSION" >&2; return 1; }
  awk -v staged="${staging[*]}" '
    BEGIN { n = split(staged, s, " "); for (i = 1; i <= n; i++) skip["k8s.io/" s[i]] = 1 }
    /^require \(/ { block = 1; next }
    block && /^\)/ { block = 0 }
    block && NF >= 2 && $1 !~ /^\/\// { pin($1, $2) }
    /^require [^(]/ { pin($2, $3) }
    function pin(m, v) { if (!(m in skip)) print "replace " m " => " m " " v }' "$gomod"
}

package_of() {  # component -> its main package in the module above
  case "$1" in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    helm) echo helm.sh/helm/v3/cmd/helm ;;
    coredns) echo ./coredns ;;
    *) echo "k8s.io/kubernetes/cmd/$1" ;;
  esac
}

build_install() {  # name module-path version
  local name=$1 path=$2 version=$3
  echo "build-binaries: building $name $version (log: $log_dir/$name.log)" >&2
  local gobin="$cache_root/src/gobin-$name-$version"
  mkdir -p "$gobin"
  GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "$path@$version" >"$log_dir/$name.log" 2>&1 \
    || die_log "building $name" "$log_dir/$name.log"
  mv "$gobin/$name" "$bin_dir/$name"
}

# A main of ours (hack/gomain/<name>/main.go) against a module at its pinned version: the
# tool with only the parts the local cluster uses. -mod=mod records the requirements the
# main's imports need, as `go get` of those packages would.
build_main() {  # name module version
  local name=$1 module=$2 version=$3 mod="$cache_root/src/$1-main-$3"
  echo "build-binaries: building $name $version, hack/gomain/$name (log: $log_dir/$name.log)" >&2
  mkdir -p "$mod"
  cp "$here/gomain/$name/main.go" "$mod/main.go"
  [ -f "$mod/go.mod" ] ||
    printf 'module dtjob.local/%s\n\ngo 1.24.0\n\nrequire %s %s\n' "$name" "$module" "$version" >"$mod/go.mod"
  (cd "$mod" && GOFLAGS="$GOFLAGS -mod=mod" go build -trimpath -ldflags "-s -w" -o "$bin_dir/$name.tmp" .) \
    >"$log_dir/$name.log" 2>&1 || die_log "building $name" "$log_dir/$name.log"
  mv "$bin_dir/$name.tmp" "$bin_dir/$name"
}

# Both commands from one module at one version. Service discovery: Kubernetes alone (the
# remove_all_sd tag leaves out the cloud ones, most of the build; file and http stay), and
# without the builtinassets tag no web UI assets are embedded: the tests use the API only.
build_prometheus() {
  local gobin="$cache_root/src/gobin-prometheus-$PROMETHEUS_VERSION" mod=github.com/prometheus/prometheus
  local minor="${PROMETHEUS_VERSION#v0.3}" ld="-s -w" p=github.com/prometheus/common/version
  local release="3.$((10#${minor%%.*})).${minor#*.}"  # v0.316.0 -> 3.16.0
  ld+=" -X $p.Version=$release -X $p.Revision=$PROMETHEUS_VERSION -X $p.Branch=HEAD"
  mkdir -p "$gobin" "$prom_dir"
  echo "build-binaries: building prometheus, promtool $PROMETHEUS_VERSION (log: $log_dir/prometheus.log)" >&2
  GOBIN="$gobin" go install -trimpath -tags remove_all_sd,enable_kubernetes_sd -ldflags "$ld" \
    "$mod/cmd/prometheus@$PROMETHEUS_VERSION" "$mod/cmd/promtool@$PROMETHEUS_VERSION" \
    >"$log_dir/prometheus.log" 2>&1 || die_log "building prometheus" "$log_dir/prometheus.log"
  mv "$gobin/prometheus" "$gobin/promtool" "$prom_dir/"
}

# Every missing tool builds at once, each in its own process: one cold build is mostly
# module downloads (network) at its start and compiles (CPU) after, so side by side the
# downloads of one overlap the compiles of another (a cold `make demo` built them one after
# the other). Each writes its own log; a failure is its one line, and the rest still finish.
build_one() {  # component
  case "$1" in
    prometheus) build_prometheus ;;
    # The real node's image registry (hack/realnode.py).
    registry)
      build_main registry github.com/distribution/distribution/v3 "$REGISTRY_VERSION"
      mkdir -p "$reg_dir" && mv "$bin_dir/registry" "$reg_dir/registry"
      ;;
    # Kueue's go.mod needs Go >= 1.25 and has no replace lines: a plain `go install` builds it
    # (about 4 min cold on 2 cores); the module stays in Go's cache for its CRDs.
    kueue)
      GOFLAGS="$GOFLAGS -mod=mod" build_install kueue sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION"
      mkdir -p "$kueue_dir" && mv "$bin_dir/kueue" "$kueue_dir/kueue"
      ;;
    # The benchmark's other operator (bench/kubeflow_operator.py). Its go.mod (Go 1.22, no
    # replace lines) builds with a plain `go install` like Kueue's (about 6 min cold on 2
    # cores); the main package is cmd/training-operator.v1, renamed to the component's name.
    kubeflow-training-operator)
      GOFLAGS="$GOFLAGS -mod=mod" build_install training-operator.v1 \
        github.com/kubeflow/training-operator/cmd/training-operator.v1 "$KUBEFLOW_TRAINING_OPERATOR_VERSION"
      mkdir -p "$kfto_dir" && mv "$bin_dir/training-operator.v1" "$kfto_dir/$1"
      ;;
  esac
}

in_together=0 others=() pids=()
for c in "${missing[@]}"; do
  case "$c" in
    promtool) others+=(prometheus) ;;  # both commands come from one build
    prometheus | registry | kueue | kubeflow-training-operator) others+=("$c") ;;
    *) in_together=1 ;;
  esac
done
# Another run may be building the same tool (hack/realnode-up.sh starts the registry and
# Helm's build beside the cluster's): one build per tool at a time, and what the other
# built is used.
together_locked() {
  exec 9>"$cache_root/src/.build-together.lock" && flock 9
  local c still=()
  for c in "${together[@]}"; do [ -x "$(built_at "$c")" ] || still+=("$c"); done
  [ ${#still[@]} -eq 0 ] || build_together "${still[@]}"
}
one_locked() {  # component
  exec 9>"$cache_root/src/.build-$1.lock" && flock 9
  [ -x "$(built_at "$1")" ] || build_one "$1"
}
[ "$in_together" = 0 ] || { together_locked & pids+=($!); }
for c in $(printf '%s\n' "${others[@]}" | sort -u); do one_locked "$c" & pids+=($!); done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
[ "$failed" -eq 0 ] || die "$failed of ${#pids[@]} builds failed (each said why above)"
link_own_versions
echo "$bin_dir"

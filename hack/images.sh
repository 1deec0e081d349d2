#!/usr/bin/env bash
# Builds the operator and trainer images (and examples/custom-image's, for the e2e tier) from
# this repository's Dockerfiles (unchanged) and pushes them to the real node's registry
# (hack/realnode.py starts it on 127.0.0.1), from which the node pulls them like any cluster.
#
#   1. base image dtjob/python-base:3.11-bookworm: debootstrap of Debian bookworm (minbase)
#      plus bookworm's python3 and python3-pip, imported with `docker import`; the Dockerfiles'
#      `FROM ${BASE_IMAGE}` resolves to it without a pull.
#   2. `docker build` of Dockerfile and trainer_image/Dockerfile (classic builder, host
#      network for pip): the dependency layers are cached in Docker's data root under
#      $DTJOB_CACHE/docker, so torch (the CUDA wheel from PyPI, GBs) downloads once.
#   3. pushed (hack/oci_push.py: layers uncompressed, only those the registry lacks) to
#      $DTJOB_REGISTRY (default: `hack/cluster.py registry`) as
#      dtjob-operator:<tag> and dtjob-trainer:<tag> (dtjob-custom-example:<custom tag>), the
#      names docs/getting-started.md uses. The tag is content-derived, <appVersion>-<12 hex of
#      both image IDs>, so a rebuilt image gets a new tag and the node's IfNotPresent pulls it;
#      a fixed tag would leave the node running the image it pulled first.
#      The tags pushed last go to $DTJOB_CACHE/images/pushed.env (hack/realnode-helm.sh).
#
# Docker Engine (Debian's docker.io) is started when needed (`make cluster-down` stops it),
# with its own data root and socket, no bridge and no iptables rules (builds use the host network).
#
# The pause image (the node's sandbox image) alone is imported into containerd (`node`).
#
# Usage: hack/images.sh [build|push|all|node|registry|stop]   (default all = build + push;
#        push needs the registry up: `make cluster-up NODE=real`; node needs CONTAINERD_SOCK;
#        registry prints its host:port, or fails when it does not answer)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${DTJOB_CACHE:-$HOME/.cache/dtjob}
work=$cache/images
logs=$work/logs
mkdir -p "$work" "$logs"
BASE_IMAGE=dtjob/python-base:3.11-bookworm
TAG=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$top/charts/dtjob-operator/Chart.yaml")
OPERATOR_IMAGE=dtjob/operator:$TAG
TRAINER_IMAGE=dtjob/trainer:$TAG
PAUSE_IMAGE=dtjob/pause:3.10  # hack/realnode.py's sandbox_image
# examples/custom-image: a user's own torchrun image, which the e2e tier runs as a user would.
# Built and pushed only with DTJOB_CUSTOM_IMAGE=1 (hack/realnode-up.sh e2e sets it): the
# demo has no use for a second multi-GB image.
CUSTOM_IMAGE=dtjob/custom-example:dev
WITH_CUSTOM=${DTJOB_CUSTOM_IMAGE:-0}
export DOCKER_HOST=unix://$work/docker.sock

die() { echo "images: $*" >&2; exit 1; }
die_log() {  # what log
  local last
  last=$(grep -v '^\s*$' "$2" 2>/dev/null | tail -n 1 | cut -c1-200)
  die "$1 failed${last:+: $last}; see $2"
}

need_packages() {  # Debian packages, installed when missing (CI runs as root)
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]} (run as root or install them)"
  echo "images: installing ${missing[*]} (log: $logs/apt.log)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"; } >"$logs/apt.log" 2>&1 \
    || die_log "apt-get install ${missing[*]}" "$logs/apt.log"
}

dockerd_up() {
  docker version >/dev/null 2>&1 && return 0
  need_packages docker.io
  echo "images: starting Docker Engine (data root $cache/docker, log: $logs/dockerd.log)" >&2
  # No bridge, no iptables: the engine must not touch the host's FORWARD policy or NAT.
  setsid dockerd --data-root "$cache/docker" --exec-root "$work/docker-exec" \
    --host "$DOCKER_HOST" --pidfile "$work/dockerd.pid" --bridge=none --iptables=false \
    --ip-masq=false >"$logs/dockerd.log" 2>&1 </dev/null &
  local i
  for i in $(seq 1 60); do
    docker version >/dev/null 2>&1 && return 0
    kill -0 $! 2>/dev/null || die_log "Docker Engine (dockerd) exited during start-up" "$logs/dockerd.log"
    sleep 1
  done
  die "Docker Engine did not answer on $DOCKER_HOST within 60 s; see $logs/dockerd.log"
}

dockerd_down() {  # only the engine this script started (recorded pid)
  local pid i mount
  pid=$(cat "$work/dockerd.pid" 2>/dev/null) || pid=""
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && grep -q "$work" "/proc/$pid/cmdline"; then
    kill "$pid" || true
    for i in $(seq 1 40); do [ -d "/proc/$pid" ] || break; sleep 0.25; done
    [ ! -d "/proc/$pid" ] || return 0 # still stopping: its mounts are its own
  fi
  # The engine leaves its bind mount of the host's network namespace behind (the exec
  # root's netns/default, nsfs): unmounted, or `rm -rf` of a cache directory fails on it.
  awk -v dir="$work/docker-exec/" 'index($2, dir) == 1 { print $2 }' /proc/self/mounts |
    sort -r | while read -r mount; do umount "$mount" 2>/dev/null || umount -l "$mount" || true; done
}

base_image() {
  # Keyed on this script's base recipe: a change of the recipe below rebuilds it.
  local key="bookworm-minbase-python3-v2"
  if [ "$(docker image inspect -f '{{index .Config.Labels "dtjob.base"}}' "$BASE_IMAGE" 2>/dev/null)" = "$key" ]; then
    return 0
  fi
  need_packages debootstrap
  local root=$work/rootfs t0=$SECONDS
  echo "images: building $BASE_IMAGE with debootstrap (log: $logs/base.log)" >&2
  rm -rf "$root"
  {
    debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
      bookworm "$root" http://deb.debian.org/debian &&
      # A base image, like python:3.11-slim: pip installs into the image's Python.
      rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED &&
      # This machine's own CAs (e.g. a TLS-inspecting egress proxy), so pip in `docker build`
      # trusts what the host trusts. The image stays local to this machine.
      { [ -z "$(ls /usr/local/share/ca-certificates/ 2>/dev/null)" ] ||
        { cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" &&
          chroot "$root" update-ca-certificates >/dev/null; }; } &&
      rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
        "$root"/usr/share/man/* "$root"/usr/share/locale/* &&
      tar -C "$root" -c . | docker import \
        --change "LABEL dtjob.base=$key" --change 'CMD ["python3"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
        - "$BASE_IMAGE"
  } >"$logs/base.log" 2>&1 || die_log "building the base image $BASE_IMAGE" "$logs/base.log"
  rm -rf "$root"
  echo "images: $BASE_IMAGE built in $((SECONDS - t0)) s" >&2
}

build() {  # image dockerfile name [build-arg...]
  local t0=$SECONDS image=$1 dockerfile=$2 name=$3
  shift 3
  echo "images: building $image from $dockerfile (log: $logs/$name.log)" >&2
  DOCKER_BUILDKIT=0 docker build --network host "$@" -f "$top/$dockerfile" -t "$image" "$top" \
    >"$logs/$name.log" 2>&1 \
    || die_log "docker build of $image ($dockerfile)" "$logs/$name.log"
  echo "images: $image ready in $((SECONDS - t0)) s, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')" >&2
}

import() {  # image: the pause image, into the real node's containerd
  local sock=${CONTAINERD_SOCK:?CONTAINERD_SOCK names the real node containerd socket}
  ctr -a "$sock" -n k8s.io images ls -q | grep -qx "docker.io/$1" && return 0
  echo "images: importing $1 into containerd (log: $logs/import.log)" >&2
  docker save "$1" | ctr -a "$sock" -n k8s.io images import - >"$logs/import.log" 2>&1 \
    || die_log "importing $1 into containerd ($sock)" "$logs/import.log"
}

registry() {  # host:port of the real node's registry, or fail when it does not answer
  local reg=${DTJOB_REGISTRY:-$(python3 "$top/hack/cluster.py" registry)}
  need_packages curl
  curl -fsS --noproxy '*' -o /dev/null "http://$reg/v2/" 2>/dev/null || return 1
  echo "$reg"
}

push() {  # local-image remote-name tag
  local ref=$REG/$2:$3
  # Layers uncompressed (hack/oci_push.py): docker push gzips them on one core, 276 s for
  # the trainer's 5 GB on a 2-core machine, to send them over 127.0.0.1.
  python3 "$top/hack/oci_push.py" "$1" "$ref" 2>"$logs/push-$2.log" \
    || die_log "pushing $ref" "$logs/push-$2.log"
  echo "images: $(tail -n 1 "$logs/push-$2.log")" >&2
}

push_all() {
  REG=$(registry) || die "no registry answers at ${DTJOB_REGISTRY:-$(python3 "$top/hack/cluster.py" registry)}; start it with \`make cluster-up NODE=real\`"
  local ids tag custom=""
  ids=$(docker image inspect -f '{{.Id}}' "$OPERATOR_IMAGE" "$TRAINER_IMAGE")
  tag=$TAG-$(echo "$ids" | sha256sum | cut -c1-12)
  push "$OPERATOR_IMAGE" dtjob-operator "$tag"
  push "$TRAINER_IMAGE" dtjob-trainer "$tag"
  if [ "$WITH_CUSTOM" = 1 ]; then
    custom=dev-$(docker image inspect -f '{{.Id}}' "$CUSTOM_IMAGE" | cut -c8-19)
    push "$CUSTOM_IMAGE" dtjob-custom-example "$custom"
  elif [ "$(sed -n 's/^REGISTRY=//p' "$work/pushed.env" 2>/dev/null)" = "$REG" ]; then
    # Not pushed this time: the one pushed before is still there (a push without it must
    # not make the e2e tier's custom-image tests lose it).
    custom=$(sed -n 's/^CUSTOM_TAG=//p' "$work/pushed.env")
  fi
  printf 'REGISTRY=%s\nTAG=%s\nCUSTOM_TAG=%s\n' "$REG" "$tag" "$custom" >"$work/pushed.env"
}

pause_image() {  # the pod sandbox image, a static Go binary (hack/images-pause)
  docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1 && return 0
  local d=$work/pause
  mkdir -p "$d"
  echo "images: building $PAUSE_IMAGE (log: $logs/pause.log)" >&2
  { (cd "$top/hack/images-pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$d/pause" .) &&
      tar -C "$d" -c pause | docker import --change 'ENTRYPOINT ["/pause"]' - "$PAUSE_IMAGE"; } \
    >"$logs/pause.log" 2>&1 || die_log "building the pause image" "$logs/pause.log"
}

verb=${1:-all}
case "$verb" in
  build | all)
    dockerd_up
    base_image
    build "$OPERATOR_IMAGE" Dockerfile operator
    # TORCH_VARIANT (cu126, cu128, cu130, cpu: docs/gpu.md) picks torch's CUDA build; passed
    # only when set, so the default build's cached layers stay valid.
    build "$TRAINER_IMAGE" trainer_image/Dockerfile trainer \
      ${TORCH_VARIANT:+--build-arg "TORCH_VARIANT=$TORCH_VARIANT"}
    [ "$WITH_CUSTOM" != 1 ] || build "$CUSTOM_IMAGE" examples/custom-image/Dockerfile custom-example
    [ "$verb" != all ] || push_all
    ;;
  push)
    dockerd_up
    push_all
    ;;
  node) # what the real node needs at start: its sandbox image
    dockerd_up
    pause_image
    import "$PAUSE_IMAGE"
    ;;
  registry) registry ;; # prints host:port, or fails when no registry answers
  stop) dockerd_down ;;
  *) die "usage: hack/images.sh [build|push|all|node|registry|stop]" ;;
esac

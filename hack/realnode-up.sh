#!/usr/bin/env bash
# The real-node stack a user would run, brought up idempotently: the local cluster with its
# real node and registry (`make cluster-up NODE=real`), the images from our Dockerfiles pushed
# to that registry (hack/images.sh), and the chart installed with Helm (hack/realnode-helm.sh).
# Shared by `make demo` and `make test-e2e`; cold it builds everything, warm it takes seconds.
# Each phase prints its name and time so a slow cold build is visibly progressing, and the
# end a line of where the time went.
#
# Cold, the work is mostly two kinds: Go builds (CPU) for the cluster, and the images'
# package downloads, writes and the push's compression. They run side by side: the images
# build and are pushed, and Helm builds, in the background from the start while the
# cluster's binaries build and it comes up. One after the other, a cold `make demo` spent
# 18.5 min on the cluster and then 9.3 on the images.
#
# Usage: hack/realnode-up.sh [label]   (label prefixes the progress lines; default realnode)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
label=${1:-realnode}
t0=$SECONDS
phase() { echo "$label: $1 (at $((SECONDS - t0)) s)" >&2; }
stages=()
took() { stages+=("$1 $2-${3:-$((SECONDS - t0))} s"); }  # name, start second[, end second]
marks=$(mktemp -d)  # the second each background job ended at

phase "0/3 Debian packages for the real node and the images (one apt-get, when missing)"
python3 "$top/hack/cluster.py" host-packages
[ "$label" != e2e ] || export DTJOB_CUSTOM_IMAGE=1  # the e2e tier also runs a user's own image
# Background work is stopped when this script fails; it outlives nothing.
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$marks"' EXIT
images_at=$((SECONDS - t0))
# The registry comes up on its own (hack/cluster.py registry-up), so the push need not
# wait for the cluster either.
{ "$top/hack/images.sh" build && python3 "$top/hack/cluster.py" registry-up &&
  "$top/hack/images.sh" push && echo $((SECONDS - t0)) >"$marks/images"; } &
images=$!
helm_at=$((SECONDS - t0))
# cluster-up builds only what the cluster runs; helm is ours to build (cached: instant).
{ "$top/hack/build-binaries.sh" helm >/dev/null && echo $((SECONDS - t0)) >"$marks/helm"; } &
helm=$!

phase "1/3 cluster with a real node (make cluster-up NODE=real); images and helm build beside it"
cluster_at=$((SECONDS - t0))
DTJOB_NODE=real python3 "$top/hack/cluster.py" up
took cluster "$cluster_at"
state=$(dirname "$(python3 "$top/hack/cluster.py" kubeconfig)")
export KUBECONFIG=$state/kubeconfig
PATH=$(cat "$state/bin-dir"):$PATH
export PATH

phase "2/3 images from Dockerfile and trainer_image/Dockerfile, pushed to $(python3 "$top/hack/cluster.py" registry) (hack/images.sh)"
wait "$images" || { echo "$label: building or pushing the images failed (the lines above say why)" >&2; exit 1; }
took "images built and pushed" "$images_at" "$(cat "$marks/images")"

phase "3/3 helm upgrade --install dtjob charts/dtjob-operator"
wait "$helm" || { echo "$label: building helm failed (the build-binaries: line above says why)" >&2; exit 1; }
took "helm built" "$helm_at" "$(cat "$marks/helm")"
install_at=$((SECONDS - t0))
"$top/hack/realnode-helm.sh" install
took "chart installed" "$install_at"
phase "ready"
echo "$label: where the time went (seconds from its start): $(printf '%s, ' "${stages[@]}" | sed 's/, $//')" >&2

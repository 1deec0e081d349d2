#!/usr/bin/env bash
# The real-node stack a user would run, brought up idempotently: the local cluster with its
# real node and registry (`make cluster-up NODE=real`), the images from our Dockerfiles pushed
# to that registry (hack/images.sh), and the chart installed with Helm (hack/realnode-helm.sh).
# Shared by `make demo` and `make test-e2e`; cold it builds everything, warm it takes seconds.
# Each phase prints its name and time so a slow cold build is visibly progressing.
#
# Usage: hack/realnode-up.sh [label]   (label prefixes the progress lines; default realnode)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
label=${1:-realnode}
t0=$SECONDS
phase() { echo "$label: $1 (at $((SECONDS - t0)) s)" >&2; }

phase "1/3 cluster with a real node (make cluster-up NODE=real)"
DTJOB_NODE=real python3 "$top/hack/cluster.py" up
state=$(dirname "$(python3 "$top/hack/cluster.py" kubeconfig)")
export KUBECONFIG=$state/kubeconfig
PATH=$(cat "$state/bin-dir"):$PATH
export PATH
phase "2/3 images from Dockerfile and trainer_image/Dockerfile, pushed to $(python3 "$top/hack/cluster.py" registry) (hack/images.sh)"
# The e2e tier also runs a user's own image (examples/custom-image); the demo does not.
[ "$label" != e2e ] || export DTJOB_CUSTOM_IMAGE=1
"$top/hack/images.sh" all
phase "3/3 helm upgrade --install dtjob charts/dtjob-operator"
# cluster-up builds only what the cluster runs; helm is ours to build (cached: instant).
"$top/hack/build-binaries.sh" helm >/dev/null
"$top/hack/realnode-helm.sh" install
phase "ready"

#!/usr/bin/env bash
# Installs (or removes) the chart on the local cluster's real node, as a user would:
# `helm upgrade --install` of charts/dtjob-operator with the images hack/images.sh pushed to
# the real node's registry (docs/getting-started.md, step 3: the same --set flags).
# The only local values: place the operator on the real node (label + taint dtjob.io/node=real).
# --take-ownership: the chart renders the CRD, and a local cluster may already hold one that
# `make dev-up`, the integration tests or an older chart (crds/ folder) created outside Helm.
# Usage: hack/realnode-helm.sh install|test|uninstall   (KUBECONFIG and helm on PATH)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
release=${DTJOB_RELEASE:-dtjob}
ns=${DTJOB_RELEASE_NAMESPACE:-dtjob-system}
pushed=${DTJOB_CACHE:-$HOME/.cache/dtjob}/images/pushed.env
case "${1:-install}" in
  install)
    [ -f "$pushed" ] || { echo "helm: no images pushed yet ($pushed); run make images" >&2; exit 1; }
    # shellcheck source=/dev/null
    source "$pushed"  # REGISTRY, TAG (content-derived: a rebuilt image is a new tag)
    helm upgrade --install "$release" "$top/charts/dtjob-operator" -n "$ns" --create-namespace \
      --take-ownership \
      --set image.repository="$REGISTRY/dtjob-operator" --set-string image.tag="$TAG" \
      --set trainer.image.repository="$REGISTRY/dtjob-trainer" --set-string trainer.image.tag="$TAG" \
      --set-string 'nodeSelector.dtjob\.io/node=real' \
      --set 'tolerations[0].key=dtjob.io/node,tolerations[0].operator=Equal' \
      --set 'tolerations[0].value=real,tolerations[0].effect=NoSchedule' \
      --wait --timeout 5m >/dev/null \
      || { echo "helm: install failed; kubectl -n $ns describe pods" >&2; exit 1; }
    echo "helm: release $release in $ns deployed" >&2
    ;;
  test) helm test "$release" -n "$ns" ;;
  uninstall) helm uninstall "$release" -n "$ns" --wait ;;
  *) echo "usage: $0 install|test|uninstall" >&2; exit 2 ;;
esac

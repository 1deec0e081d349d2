#!/usr/bin/env bash
# `make demo`: the local cluster with its real node, our images, the chart installed with
# Helm, and CPU example jobs that really train in containers. Idempotent: a warm re-run
# reuses the cluster, the images and the release and only re-runs the jobs.
#
# Usage: hack/realnode-demo.sh [examples/cpu/<job>.yaml ...]   (default: data-parallel, pipeline-1f1b)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
t0=$SECONDS
# The Python environment (for reading the manifests below) builds beside the cluster and the
# images: cold, it is downloads and unpacking, 1.5-2 min that no longer come first.
py=${DTJOB_PYTHON:-}
venv_out=$(mktemp)
trap 'rm -f "$venv_out" "$venv_out.s"' EXIT
venv= venv_s=
[ -n "$py" ] || { { "$top/hack/venv.sh" >"$venv_out" && echo $((SECONDS - t0)) >"$venv_out.s"; } & venv=$!; }
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(examples/cpu/data-parallel.yaml examples/cpu/pipeline-1f1b.yaml)
die() { echo "demo: $*" >&2; exit 1; }

"$top/hack/realnode-up.sh" demo
setup_s=$((SECONDS - t0))
if [ -z "$py" ]; then
  wait "$venv" || die "creating the Python environment failed (the venv: line above says why)"
  py=$(cat "$venv_out")/bin/python
  venv_s=$(cat "$venv_out.s")
fi
state=$(dirname "$(python3 "$top/hack/cluster.py" kubeconfig)")
export KUBECONFIG=$state/kubeconfig
PATH=$(cat "$state/bin-dir"):$PATH
export PATH
echo "demo: kubectl apply ${jobs[*]}" >&2
names=()
for j in "${jobs[@]}"; do
  # The job's name; a manifest may carry other objects too (a ConfigMap of its code).
  name=$("$py" -c 'import sys,yaml; print(next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "DistributedTrainingJob")["metadata"]["name"])' "$top/$j")
  kubectl delete dtj "$name" --ignore-not-found --wait=true >/dev/null
  "$py" "$top/hack/realnode_overlay.py" "$top/$j" | kubectl apply -f -
  names+=("$name")
done
echo "demo: watching (kubectl get dtj -w); Ctrl-C stops watching, the jobs go on" >&2
kubectl get dtj -w &
watcher=$!
trap 'kill $watcher 2>/dev/null || true; rm -f "$venv_out" "$venv_out.s"' EXIT
deadline=$((SECONDS + 900))
while :; do
  phases=$(kubectl get dtj "${names[@]}" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}')
  done=$(grep -cE '^(Succeeded|Failed)$' <<<"$phases" || true)
  [ "$done" -eq ${#names[@]} ] && break
  [ $SECONDS -lt $deadline ] || die "jobs not finished after 15 min; kubectl describe dtj ${names[*]}"
  sleep 3
done
kill $watcher 2>/dev/null || true
echo
for n in "${names[@]}"; do
  kubectl get dtj "$n" -o jsonpath='{.metadata.name}: {.status.phase}, step {.status.progress.step}/{.status.progress.totalSteps}, loss {.status.progress.loss}, held-out accuracy {.status.progress.accuracy}{"\n"}'
  echo "  logs: kubectl logs $n-$(kubectl get pods -l dtjob.io/job-name="$n" -o jsonpath='{.items[0].metadata.labels.dtjob\.io/role}')-0   (export KUBECONFIG=$KUBECONFIG)"
done
echo "demo: done in $((SECONDS - t0)) s: set-up $setup_s s (the demo: line before the jobs says where it went${venv_s:+; the Python environment, beside it, 0-$venv_s s}), the jobs $((SECONDS - t0 - setup_s)) s. Node logs: $state/logs/. The cluster keeps running; stop it with: make cluster-down"

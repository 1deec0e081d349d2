#!/usr/bin/env bash
# The developer loop on top of the local cluster (make dev-up / dev-down): install the CRDs
# and run the operator on the host against the admin kubeconfig, with its pid and log in
# the cluster state dir next to the control plane's.
#
# Usage: hack/cluster-dev.sh up|down     (DTJOB_PYTHON: the venv python, set by make)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
state=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import cluster; print(cluster.Config.from_env().state)' "$top/hack")
kubeconfig=$(python3 "$top/hack/cluster.py" kubeconfig)
pidfile=$state/pids/operator.pid log=$state/logs/operator.log

operator_pid() {  # the recorded pid, if that process is still our operator
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "-m dtjob_operator" && echo "$pid"
}

case "${1:-}" in
  up)
    bins=$(cat "$state/bin-dir" 2>/dev/null || true)
    if compgen -G "$top/crds/*.yaml" >/dev/null; then
      "${bins:+$bins/}kubectl" --kubeconfig "$kubeconfig" apply --server-side -f "$top/crds/" >/dev/null
      echo "dev-up: CRDs from crds/ applied" >&2
    fi
    # ---- operator hook: runs once operator/dtjob_operator/__main__.py exists ----
    if [ ! -f "$top/operator/dtjob_operator/__main__.py" ]; then
      echo "dev-up: no operator yet (operator/dtjob_operator/__main__.py); cluster only" >&2
      exit 0
    fi
    if pid=$(operator_pid); then echo "dev-up: operator already running (pid $pid)" >&2; exit 0; fi
    : "${DTJOB_PYTHON:?set DTJOB_PYTHON to the venv python (make dev-up does)}"
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$log")"
    KUBECONFIG=$kubeconfig PYTHONPATH="$top/api:$top/operator${PYTHONPATH:+:$PYTHONPATH}" \
      setsid "$DTJOB_PYTHON" -m dtjob_operator >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    sleep 2  # an import error or bad settings kill it at once: say so rather than claim success
    operator_pid >/dev/null || { echo "dev-up: the operator exited on start; see $log" >&2; exit 1; }
    echo "dev-up: operator running (pid $(cat "$pidfile"), log $log)" >&2
    ;;
  down)
    if pid=$(operator_pid); then
      kill "$pid"
      for _ in $(seq 100); do operator_pid >/dev/null || break; sleep 0.1; done
      operator_pid >/dev/null && kill -9 "$pid"
      echo "dev-down: operator stopped" >&2
    fi
    rm -f "$pidfile"
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

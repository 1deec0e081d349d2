#!/usr/bin/env bash
# hack/test-lanes.sh: the test tiers of `make test` in two lanes side by side, each a
# sequence of make targets:
#   unit:    the GPU rehearsal, then tests/unit (CPU-bound: torch ranks on every core), niced
#   cluster: tests/integration, then the e2e tier (DTJOB_E2E=0 leaves it out)
# The cluster lane mostly waits (on the API server, the operator's passes, containers), the
# unit lane mostly computes: side by side they take about as long as the longer one, where
# one after the other they took their sum. The unit lane runs at a lower priority so that
# the control plane, the operator and the containers the cluster lane's tests time answer
# promptly. Each line is prefixed with its lane; each step's wall time goes to phases.tsv
# as "lane:<step>" (hack/timed.sh), and the whole as "lanes". Exits non-zero when either
# lane failed; both always run to the end.
set -uo pipefail
MAKE=${MAKE:-make}
TIMED="$(dirname "$0")/timed.sh"
M=("$MAKE" --no-print-directory)

unit_lane() {
  local rc=0
  "$TIMED" "lane:gpu-rehearsal" "${M[@]}" gpu-rehearsal || rc=1
  "$TIMED" "lane:unit" "${M[@]}" _pytest PYTEST_PATHS=tests/unit \
    PYTEST_MARK="not e2e and not gpu" PYTEST_TIER=unit || rc=1
  return "$rc"
}

cluster_lane() {
  local rc=0
  "$TIMED" "lane:integration" "${M[@]}" _pytest PYTEST_PATHS=tests/integration \
    PYTEST_MARK="not e2e and not gpu" PYTEST_TIER=integration || rc=1
  if [ "${DTJOB_E2E:-1}" != 0 ]; then
    "$TIMED" "lane:e2e" "${M[@]}" test-e2e || rc=1
  else
    echo "make test: e2e tier left out (DTJOB_E2E=0); make test-e2e runs it alone"
  fi
  return "$rc"
}

# `sed -u` keeps each lane's lines whole and in order; PIPESTATUS keeps the lane's status.
prefixed() {
  local name=$1
  shift
  "$@" 2>&1 | sed -u "s/^/[$name] /"
  return "${PIPESTATUS[0]}"
}

case "${1:-}" in
  unit) unit_lane; exit ;;
  cluster) cluster_lane; exit ;;
esac
prefixed unit nice -n 10 "$0" unit &
unit_pid=$!
prefixed cluster "$0" cluster &
cluster_pid=$!
rc=0
wait "$unit_pid" || { rc=1; echo "make test: the unit lane failed (lines marked [unit])"; }
wait "$cluster_pid" || { rc=1; echo "make test: the cluster lane failed (lines marked [cluster])"; }
exit "$rc"

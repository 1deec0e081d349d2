#!/usr/bin/env bash
# hack/test-lanes.sh: the test tiers of `make test` in lanes side by side, each a sequence of
# make targets:
#   unit:        the GPU rehearsal, then tests/unit (CPU-bound: torch ranks on every core)
#   integration: tests/integration, on a control plane of its own (fake GPU nodes)
#   e2e:         the e2e tier on the default cluster with the real node (DTJOB_E2E=0: none)
# The integration lane mostly waits (on the API server and the operator's passes), the e2e
# lane on containers, whose CPU the node's limits cap, and the unit lane computes: side by
# side they take about as long as the longest, where one after the other they took their
# sum. The two cluster lanes need two clusters (the e2e tier's has the real node, the
# integration tests' must not): the integration lane's has its own state directory and
# ports (hack/cluster.py). The unit lane runs at a lower priority so that the control
# planes, the operator and the containers, which the cluster lanes' tests time, answer
# promptly. Each line is prefixed with its lane; each step's wall time goes to phases.tsv
# as "lane:<step>" (hack/timed.sh), and the whole as "lanes". Exits non-zero when a lane
# failed; every lane always runs to the end.
set -uo pipefail
MAKE=${MAKE:-make}
TIMED="$(dirname "$0")/timed.sh"
M=("$MAKE" --no-print-directory)
CACHE=${DTJOB_CACHE:-$HOME/.cache/dtjob}

unit_lane() {
  local rc=0
  "$TIMED" "lane:gpu-rehearsal" "${M[@]}" gpu-rehearsal || rc=1
  "$TIMED" "lane:unit" "${M[@]}" _pytest PYTEST_PATHS=tests/unit \
    PYTEST_MARK="not e2e and not gpu" PYTEST_TIER=unit || rc=1
  return "$rc"
}

integration_lane() {
  # Its own cluster, unless the tests are pointed at one (DTJOB_KUBECONFIG).
  export DTJOB_CLUSTER_STATE=${DTJOB_INTEGRATION_CLUSTER_STATE:-$CACHE/cluster-integration}
  export DTJOB_CLUSTER_PORT_BASE=${DTJOB_INTEGRATION_PORT_BASE:-16540}
  "$TIMED" "lane:integration" "${M[@]}" _pytest PYTEST_PATHS=tests/integration \
    PYTEST_MARK="not e2e and not gpu" PYTEST_TIER=integration
}

e2e_lane() {
  "$TIMED" "lane:e2e" "${M[@]}" test-e2e
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
  integration) integration_lane; exit ;;
  e2e) e2e_lane; exit ;;
esac
lanes=(unit integration)
if [ "${DTJOB_E2E:-1}" != 0 ]; then
  lanes+=(e2e)
else
  echo "make test: e2e tier left out (DTJOB_E2E=0); make test-e2e runs it alone"
fi
pids=()
for lane in "${lanes[@]}"; do
  if [ "$lane" = unit ]; then
    prefixed unit nice -n 10 "$0" unit &
  else
    prefixed "$lane" "$0" "$lane" &
  fi
  pids+=($!)
done
rc=0
for i in "${!lanes[@]}"; do
  wait "${pids[$i]}" || { rc=1; echo "make test: the ${lanes[$i]} lane failed (lines marked [${lanes[$i]}])"; }
done
exit "$rc"

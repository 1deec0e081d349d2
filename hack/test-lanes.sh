#!/usr/bin/env bash
# hack/test-lanes.sh: the test tiers of `make test` in lanes side by side, each a sequence of
# make targets:
#   rehearsal:   the GPU rehearsal (mk/gpu.mk: the GPU machine's script on CPU under its
#                torch); a lane of its own: before tests/unit in one lane it was a quarter
#                of the run's critical path while using a third of a core
#   unit:        tests/unit (CPU-bound: torch ranks on every core)
#   integration: tests/integration, on a control plane of its own (fake GPU nodes)
#   integration-2: a second process over tests/integration, on a second control plane,
#                that takes test files from the end while the first takes them from the
#                start (tests/helpers/file_queue.py): the integration tests mostly wait on
#                the API server and the operator's passes, and one process over all of
#                them was the run's longest lane (25-40 min)
#   e2e:         the e2e tier on the default cluster with the real node (DTJOB_E2E=0: none)
#   unit-helper: started when the first other lane ends, a second process over tests/unit
#                that takes test files from the end while the unit lane takes them from the
#                start (tests/helpers/file_queue.py): with the cluster lanes done, the unit
#                lane alone left a core idle a quarter of the time
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
# A few failed tests run again, alone, once the lanes have ended (hack/failed_tests.py says
# which): the CI machine's speed varies 1.5-3x from run to run, and a test that waits on a
# loaded machine's processes can fail there and pass alone. The run passes only when every
# one of them passes alone; the summary lists them as FLAKY all the same, so that they get
# fixed. A lane that failed otherwise, or many failures, fail the run as they stand.
set -uo pipefail
MAKE=${MAKE:-make}
TIMED="$(dirname "$0")/timed.sh"
M=("$MAKE" --no-print-directory)
CACHE=${DTJOB_CACHE:-$HOME/.cache/dtjob}

# The unit tests, sharing their files with the helper through a claims folder that the
# lanes' run makes afresh (DTJOB_LANES_CLAIMS); run alone, a lane takes every file.
unit_tests() {
  local tier=$1 from_end=$2
  DTJOB_TEST_CLAIMS=${DTJOB_LANES_CLAIMS:-} DTJOB_TEST_CLAIMS_FROM_END=$from_end \
    "$TIMED" "lane:$tier" "${M[@]}" _pytest PYTEST_PATHS=tests/unit \
    PYTEST_MARK="not e2e and not gpu" PYTEST_TIER="$tier"
}

rehearsal_lane() {
  "$TIMED" "lane:gpu-rehearsal" "${M[@]}" gpu-rehearsal
}

integration_lane() {
  # Its own cluster, unless the tests are pointed at one (DTJOB_KUBECONFIG); the second
  # lane's is another (its state and ports), and the two share the files.
  local tier=$1 from_end=$2 state=$3 port=$4
  export DTJOB_CLUSTER_STATE=$state DTJOB_CLUSTER_PORT_BASE=$port
  DTJOB_TEST_CLAIMS=${DTJOB_LANES_INTEGRATION_CLAIMS:-} DTJOB_TEST_CLAIMS_FROM_END=$from_end \
    "$TIMED" "lane:$tier" "${M[@]}" _pytest PYTEST_PATHS=tests/integration \
    PYTEST_MARK="not e2e and not gpu" PYTEST_TIER="$tier"
}
INTEGRATION_STATE=${DTJOB_INTEGRATION_CLUSTER_STATE:-$CACHE/cluster-integration}
INTEGRATION_PORT=${DTJOB_INTEGRATION_PORT_BASE:-16540}

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

# A failed tier's tests, again (hack/failed_tests.py's rerun/<tier>.args), in its own
# lane's setting: junit as rerun-<tier>, which test_durations.py sets beside the first run.
rerun() {
  local tier=$1 args=$2
  case "$tier" in
    unit) "$TIMED" "lane:rerun-unit" "${M[@]}" _pytest PYTEST_PATHS="@$args" \
      PYTEST_MARK="not e2e and not gpu" PYTEST_TIER=rerun-unit ;;
    integration)
      export DTJOB_CLUSTER_STATE=$INTEGRATION_STATE DTJOB_CLUSTER_PORT_BASE=$INTEGRATION_PORT
      "$TIMED" "lane:rerun-integration" "${M[@]}" _pytest PYTEST_PATHS="@$args" \
        PYTEST_MARK="not e2e and not gpu" PYTEST_TIER=rerun-integration ;;
    e2e) "$TIMED" "lane:rerun-e2e" "${M[@]}" test-e2e PYTEST_PATHS="@$args" E2E_TIER=rerun-e2e ;;
    *) return 1 ;;
  esac
}

case "${1:-}" in
  rerun) rerun "$2" "$3"; exit ;;
  rehearsal) rehearsal_lane; exit ;;
  unit) unit_tests unit 0; exit ;;
  integration) integration_lane integration 0 "$INTEGRATION_STATE" "$INTEGRATION_PORT"; exit ;;
  integration-2)
    integration_lane integration-2 1 "$INTEGRATION_STATE-2" "$((INTEGRATION_PORT + 100))"; exit ;;
  e2e) e2e_lane; exit ;;
  unit-helper) unit_tests unit-helper 1; exit ;;
esac
lanes=(rehearsal unit integration)
# A second integration process only where a second control plane is ours to start.
[ -n "${DTJOB_KUBECONFIG:-}" ] || [ "${DTJOB_INTEGRATION_LANES:-2}" = 1 ] || lanes+=(integration-2)
if [ "${DTJOB_E2E:-1}" != 0 ]; then
  lanes+=(e2e)
else
  echo "make test: e2e tier left out (DTJOB_E2E=0); make test-e2e runs it alone"
fi
export DTJOB_LANES_CLAIMS=${TEST_REPORTS:-$(pwd)/.test-reports}/unit-claims
export DTJOB_LANES_INTEGRATION_CLAIMS=${TEST_REPORTS:-$(pwd)/.test-reports}/integration-claims
rm -rf "$DTJOB_LANES_CLAIMS" "$DTJOB_LANES_INTEGRATION_CLAIMS"
mkdir -p "$DTJOB_LANES_CLAIMS" "$DTJOB_LANES_INTEGRATION_CLAIMS"
# The machine's load beside the lanes, every 2 minutes: the load average and the six
# busiest processes of that moment (top's second pass: CPU over the last second, not since
# their start). A run far slower than its committed figure then shows whether something
# outside the tests took the cores (hack/test_durations.py sums it up).
LOAD_LOG=${TEST_REPORTS:-$(pwd)/.test-reports}/load.txt
: >"$LOAD_LOG"
sample_load() {
  while sleep "${DTJOB_LOAD_EVERY:-120}"; do
    {
      echo "load $(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"
      top -b -c -n 2 -d 1 -o %CPU -w 200 2>/dev/null |
        awk '/^top -/ {pass++} pass == 2 && $1 ~ /^[0-9]+$/ {$1 = $2 = $3 = $4 = $5 = $6 = $7 = $8 = $10 = $11 = ""; print "proc", $0; if (++n == 6) exit}'
    } >>"$LOAD_LOG"
  done
}
# The machine's speed before the lanes start: one fixed pure-Python loop, timed. The CI
# machine of 2026-11-28 ran the same tree 2.5-3.4x slower than stop 33's (cold mypy 50 s
# against 17 s, the GPU rehearsal 207 s against 61 s): set beside the lanes' wall and CPU
# times, the gauge tells a slower machine from a heavier suite.
python3 -c 'import time; t = time.perf_counter(); sum(i * i for i in range(4_000_000)); print("gauge_seconds", round(time.perf_counter() - t, 3))' >>"$LOAD_LOG" 2>/dev/null
# The real node's containers run in the kubelet's cgroups, outside the lanes' (timed.sh):
# their CPU is counted apart, from the kubepods cgroup's usage before and after.
KUBEPODS=/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage
containers_before=$(cat "$KUBEPODS" 2>/dev/null || echo 0)
containers_cpu() {
  local after
  after=$(cat "$KUBEPODS" 2>/dev/null) || return 0
  # A node started during the run made the cgroup afresh: it counts from zero.
  [ "$after" -ge "$containers_before" ] || containers_before=0
  awk -v a="$containers_before" -v b="$after" 'BEGIN { printf "containers_cpu_seconds %.1f\n", (b - a) / 1e9 }' >>"$LOAD_LOG"
}
sample_load </dev/null >/dev/null 2>&1 &
sampler=$!
trap 'kill "$sampler" 2>/dev/null; containers_cpu' EXIT
declare -A running=() # pid -> lane
start() {
  local lane=$1
  if [ "$lane" = unit ] || [ "$lane" = unit-helper ] || [ "$lane" = rehearsal ]; then
    prefixed "$lane" nice -n 10 "$0" "$lane" &
  else
    prefixed "$lane" "$0" "$lane" &
  fi
  running[$!]=$lane
}
for lane in "${lanes[@]}"; do
  start "$lane"
done
rc=0
helper=0
while [ "${#running[@]}" -gt 0 ]; do
  finished=""
  wait -n -p finished "${!running[@]}"
  status=$?
  [ -n "$finished" ] || break
  lane=${running[$finished]}
  unset "running[$finished]"
  if [ "$status" -ne 0 ]; then
    rc=1
    echo "make test: the $lane lane failed (lines marked [$lane])"
  fi
  # The first other lane to end (the rehearsal, a cluster lane) frees a core: a second
  # unit process takes it.
  if [ "$helper" = 0 ] && [ "$lane" != unit ] && [[ " ${running[*]} " == *" unit "* ]]; then
    helper=1
    start unit-helper
  fi
done
if [ "$rc" -ne 0 ]; then
  reports=${TEST_REPORTS:-$(pwd)/.test-reports}
  if python3 "$(dirname "$0")/failed_tests.py" --reports "$reports"; then
    rc=0
    for args in "$reports"/rerun/*.args; do
      tier=$(basename "$args" .args)
      prefixed "rerun-$tier" "$0" rerun "$tier" "$args" || rc=1
    done
    if [ "$rc" -eq 0 ]; then
      echo "make test: every failed test passed when run again alone (FLAKY in the summary)"
    fi
  fi
fi
exit "$rc"

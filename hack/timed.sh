#!/usr/bin/env bash
# hack/timed.sh NAME COMMAND...: runs COMMAND and appends "NAME<TAB>seconds<TAB>exit code
# <TAB>CPU seconds" to $TEST_REPORTS/phases.tsv, for the timing summary of `make test`
# (hack/test_durations.py). The CPU seconds are those of COMMAND and everything it starts,
# daemons included (a lane's control plane), read from a cpuacct cgroup of its own where the
# machine has cgroup v1's cpuacct and lets us write it (root on the CI machine), else "-".
# Containers on the real node are in the kubelet's cgroups, not here: test-lanes.sh counts
# them apart. Wall time alone cannot tell a slower machine from a suite that does more: the
# CPU seconds can. Exits with COMMAND's status.
set -uo pipefail
name=$1
shift
CPUACCT=/sys/fs/cgroup/cpuacct
group=""
# Nested under the caller's own group, so that an outer phase ("lanes") still counts the
# inner ones (cpuacct's usage is hierarchical).
here=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ { print $3 }' /proc/self/cgroup 2>/dev/null)
if [ -n "${TEST_REPORTS:-}" ] && [ -w "$CPUACCT${here%/}/cgroup.procs" ]; then
  # Groups of earlier phases that were not empty when they ended (a daemon's last moments):
  # rmdir removes only the empty ones, never a running phase's.
  for old in "$CPUACCT${here%/}"/dtjob-*/; do rmdir "$old" 2>/dev/null; done
  group="$CPUACCT${here%/}/dtjob-${name//[^A-Za-z0-9_-]/_}-$$"
  if mkdir "$group" 2>/dev/null && echo $$ >"$group/cgroup.procs" 2>/dev/null; then :; else
    group=""
  fi
fi
start=$(date +%s.%N)
"$@"
rc=$?
cpu=-
if [ -n "$group" ]; then
  cpu=$(awk '{ printf "%.1f", $1 / 1e9 }' "$group/cpuacct.usage")
  echo $$ >"$CPUACCT${here%/}/cgroup.procs" 2>/dev/null
  rmdir "$group" 2>/dev/null # kept while a daemon it started still runs; harmless
fi
if [ -n "${TEST_REPORTS:-}" ]; then
  mkdir -p "$TEST_REPORTS"
  awk -v n="$name" -v a="$start" -v b="$(date +%s.%N)" -v rc="$rc" -v cpu="$cpu" \
    'BEGIN { printf "%s\t%.1f\t%d\t%s\n", n, b - a, rc, cpu }' >>"$TEST_REPORTS/phases.tsv"
fi
exit "$rc"

#!/usr/bin/env bash
# hack/timed.sh NAME COMMAND...: runs COMMAND and appends "NAME<TAB>seconds<TAB>exit code" to
# $TEST_REPORTS/phases.tsv, for the timing summary of `make test` (hack/test_durations.py).
# Exits with COMMAND's status.
set -uo pipefail
name=$1
shift
start=$(date +%s.%N)
"$@"
rc=$?
if [ -n "${TEST_REPORTS:-}" ]; then
  mkdir -p "$TEST_REPORTS"
  awk -v n="$name" -v a="$start" -v b="$(date +%s.%N)" -v rc="$rc" \
    'BEGIN { printf "%s\t%.1f\t%d\n", n, b - a, rc }' >>"$TEST_REPORTS/phases.tsv"
fi
exit "$rc"

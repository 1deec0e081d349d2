#!/usr/bin/env bash
# `make gpu-rehearsal`: hack/gpu-check.sh end to end on this CPU machine, in an
# environment like the GPU machine's (docs/gpu.md): Python 3.12 with
# requirements/gpu-image.txt (torch 2.11 and the image's other packages the trainer
# uses) and nothing else, the GPU kit's wheels installed by the script itself as there.
# Every module must import, every case a GPU would run must run on the CPU under that
# torch (tests/gpu/test_rehearsal_cpu.py), every CUDA test must skip saying why, and
# bench/gpu.py must take its no-CUDA path. The environment is cached under $DTJOB_CACHE,
# keyed by the pins; a warm run costs the check alone.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${DTJOB_CACHE:-$HOME/.cache/dtjob}
# The GPU image's Python is 3.12; this machine's image has it under pyenv.
python=${REHEARSAL_PYTHON:-}
for candidate in "$python" /root/.pyenv/versions/3.12*/bin/python3 "$(command -v python3.12 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] &&
    "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "gpu-rehearsal: no Python 3.12 found (set REHEARSAL_PYTHON)" >&2
  exit 1
fi
key=$({ "$python" --version; cat "$top/requirements/gpu-image.txt"; } | sha256sum | cut -c1-12)
venv="$cache_root/gpu-rehearsal-$key"
mkdir -p "$cache_root"
if [ ! -f "$venv/.complete" ]; then
  exec 9>"$venv.lock"
  flock 9
  if [ ! -f "$venv/.complete" ]; then
    echo "gpu-rehearsal: creating $venv (log: $venv.log)" >&2
    rm -rf "$venv"
    {
      "$python" -m venv "$venv" &&
        "$venv/bin/python" -m pip install -r "$top/requirements/gpu-image.txt" &&
        "$venv/bin/python" -c 'import torch, sklearn, pytest, xdist'
    } >"$venv.log" 2>&1 || {
      echo "gpu-rehearsal: creating the environment failed; see $venv.log" >&2
      exit 1
    }
    touch "$venv/.complete"
  fi
  flock -u 9
fi
"$top/hack/gpu-kit.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# PYTHONPATH from make (the checkout's packages) is the script's own to set; nothing of the
# project venv may leak in. The budget is the GPU window's on the GPU machine; here the CPU
# cases run on 2 cores beside make test's other lane (hack/test-lanes.sh), about twice as
# long as alone (176 s of tests where alone they took 97), so the rehearsal gets more.
rc=0
env -u PYTHONPATH -u VIRTUAL_ENV OUT="$out" PYTHON="$venv/bin/python" \
  GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-1200}" GPU_TEST_WORKERS="${GPU_TEST_WORKERS:-2}" \
  bash "$top/hack/gpu-check.sh" || rc=$?
"$venv/bin/python" "$top/hack/gpu_rehearsal_verdict.py" "$out" || rc=1
if [ -n "${TEST_REPORTS:-}" ] && [ -f "$out/tests-gpu.xml" ]; then
  mkdir -p "$TEST_REPORTS" && cp "$out/tests-gpu.xml" "$TEST_REPORTS/gpu-rehearsal.xml"
fi
exit "$rc"

#!/usr/bin/env bash
# Creates (once) the project's Python virtual environment in a cache directory keyed by
# the content of requirements/*.txt, and prints its path. The venv holds dependencies
# only; our own packages are used from the checkout (PYTHONPATH), so one cached venv
# serves every clone. pip's download cache makes a rebuild after a pin change cheap.
# Concurrent callers (make targets, tests) serialise on a lock: the first builds, the
# others wait and reuse.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${DTJOB_CACHE:-$HOME/.cache/dtjob}
python=${PYTHON:-python3}
key=$(cat "$top"/requirements/{client,dev,operator,trainer}.txt | "$python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:12])')
venv="$cache_root/venv-$key"
mkdir -p "$cache_root"
if [ ! -f "$venv/.complete" ]; then
  exec 9>"$venv.lock"
  flock 9
  if [ ! -f "$venv/.complete" ]; then
    echo "venv: creating $venv (log: $venv.log)" >&2
    rm -rf "$venv"
    {
      "$python" -m venv "$venv" &&
        "$venv/bin/python" -m pip install --upgrade pip==25.3 &&
        "$venv/bin/python" -m pip install -r "$top/requirements/operator.txt" \
          -r "$top/requirements/trainer.txt" -r "$top/requirements/client.txt" \
          -r "$top/requirements/dev.txt" &&
        "$venv/bin/python" -c 'import kopf, kubernetes, torch, sklearn, pytest, click, PIL'
    } >"$venv.log" 2>&1 || {
      echo "venv: creating the Python environment failed; see $venv.log" >&2
      exit 1
    }
    touch "$venv/.complete"
  fi
  flock -u 9
fi
echo "$venv"

#!/usr/bin/env bash
# Creates (once) the project's Python virtual environment in a cache directory keyed by
# the content of requirements/*.txt, and prints its path. The venv holds dependencies
# only; our own packages are used from the checkout (PYTHONPATH), so one cached venv
# serves every clone. pip's download cache makes a rebuild after a pin change cheap.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${DTJOB_CACHE:-$HOME/.cache/dtjob}
python=${PYTHON:-python3}
key=$(cat "$top"/requirements/*.txt | "$python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:12])')
venv="$cache_root/venv-$key"
if [ ! -f "$venv/.complete" ]; then
  echo "venv: creating $venv (log: $cache_root/venv-$key.log)" >&2
  rm -rf "$venv"
  mkdir -p "$cache_root"
  {
    "$python" -m venv "$venv" &&
      "$venv/bin/pip" install --upgrade pip==25.3 &&
      "$venv/bin/pip" install -r "$top/requirements/operator.txt" -r "$top/requirements/trainer.txt" \
        -r "$top/requirements/dev.txt"
  } >"$cache_root/venv-$key.log" 2>&1 || {
    echo "venv: pip install failed; see $cache_root/venv-$key.log" >&2
    exit 1
  }
  touch "$venv/.complete"
fi
echo "$venv"

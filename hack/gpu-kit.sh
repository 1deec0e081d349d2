#!/usr/bin/env bash
# `make gpu-kit`: the wheels the GPU machine lacks, into .gpu-kit/ (ignored; it travels
# with `carry: [".gpu-kit"]`). That machine has Python 3.12 and torch but no pydantic, and
# reaches no package registry, so the trainer's one non-torch dependency travels as
# cp312 manylinux wheels: pydantic at requirements/trainer.txt's pin, its dependencies at
# requirements/gpu-kit.txt's. Idempotent: a kit whose stamp matches the pins is kept.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
kit=${GPU_KIT:-$top/.gpu-kit}
python=${PYTHON:-python3}
pins=$(
  {
    grep -E '^pydantic==' "$top/requirements/trainer.txt"
    grep -E '^[A-Za-z0-9_.-]+==' "$top/requirements/gpu-kit.txt"
  } | sed 's/[[:space:]]*#.*//'
)
stamp=$(printf '%s\n' "$pins" | sha256sum | cut -c1-12)
if [ -f "$kit/.stamp" ] && [ "$(cat "$kit/.stamp")" = "$stamp" ]; then
  echo "gpu-kit: $kit is current ($(ls "$kit"/*.whl | wc -l) wheels)"
  exit 0
fi
rm -rf "$kit"
mkdir -p "$kit"
# pip matches each manylinux tag exactly: name every one a wheel of these may carry.
# shellcheck disable=SC2086
"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$kit" \
  --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any \
  $pins
n=$(ls "$kit"/*.whl | wc -l)
if [ "$n" -ne "$(printf '%s\n' "$pins" | wc -l)" ]; then
  echo "gpu-kit: expected one wheel per pin, got $n in $kit" >&2
  exit 1
fi
echo "$stamp" >"$kit/.stamp"
echo "gpu-kit: $n wheels, $(du -sh "$kit" | cut -f1), in $kit"

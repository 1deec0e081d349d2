#!/usr/bin/env bash
# Every GPU check in one run that fits a GPU window (docs/gpu.md). On the GPU machine:
#
#   bash hack/gpu-check.sh          (run from the repository root, carry: [".gpu-kit"])
#
# 1. installs the kit's wheels (make gpu-kit) to a temporary target, nothing else;
# 2. records the machine: GPU, driver, CUDA, Python, torch, the image's packages;
# 3. imports every module of dtjob_api and dtjob_trainer (tests/gpu/test_imports.py);
# 4. runs tests/gpu, bounded;
# 5. runs bench/gpu.py on what is left of the budget, cheapest measurement first;
# and writes everything to $OUT (default .gpu-out/): gpu.json, tests-gpu.xml, the logs.
# GPU_CHECK_BUDGET (seconds, default 420) bounds steps 3-5 together; TESTS_SHARE of it
# (default 40 %) is the tests' at most. Exit status: 0 when the imports and tests passed
# and the bench wrote its record, 1 otherwise. `make gpu-rehearsal` runs this very script
# on CPU with the GPU image's Python and torch.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=${OUT:-$top/.gpu-out}
kit=${GPU_KIT:-$top/.gpu-kit}
python=${PYTHON:-python3}
budget=${GPU_CHECK_BUDGET:-420}
tests_share=${TESTS_SHARE:-40}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
mkdir -p "$out"
rc=0

site=$(mktemp -d)/site
if ! ls "$kit"/*.whl >/dev/null 2>&1; then
  echo "gpu-check: no wheels in $kit; run 'make gpu-kit' and carry .gpu-kit" >&2
  exit 1
fi
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target "$site" "$kit"/*.whl || exit 1
export PYTHONPATH="$site:$top/api:$top/trainer_image:$top/tests"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

{
  echo "== $(date -u +%FT%TZ) budget ${budget}s"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 ||
    echo "nvidia-smi: none"
  "$python" - <<'PY'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu{i}", p.name, f"{p.total_memory / 2**30:.1f} GiB", f"sm_{p.major}{p.minor}")
PY
} 2>&1 | tee "$out/machine.txt"
"$python" -m pip list --format=freeze >"$out/pip-freeze.txt" 2>/dev/null

# The tests: several at once when pytest-xdist is there (the GPU image has it; every
# case is small), all under one deadline. SIGINT lets pytest write its junit XML.
xdist=()
if "$python" -c 'import xdist' 2>/dev/null; then xdist=(-n "${GPU_TEST_WORKERS:-4}"); fi
tests_budget=$((budget * tests_share / 100))
echo "== tests/gpu (at most ${tests_budget}s)"
timeout -s INT -k 15 "$tests_budget" "$python" -m pytest tests/gpu -m gpu -rs \
  -p no:cacheprovider --timeout 150 "${xdist[@]}" \
  --junitxml="$out/tests-gpu.xml" -o junit_family=xunit2 2>&1 | tee "$out/tests-gpu.log"
trc=${PIPESTATUS[0]}
[ "$trc" -eq 0 ] || { echo "gpu-check: tests/gpu exited $trc"; rc=1; }

bench_budget=$(left)
echo "== bench/gpu.py (at most ${bench_budget}s)"
"$python" bench/gpu.py --budget "$bench_budget" --out "$out/gpu.json" \
  >"$out/bench-gpu.log" 2>&1
brc=$?
tail -n 60 "$out/bench-gpu.log"
[ "$brc" -eq 0 ] && [ -s "$out/gpu.json" ] || { echo "gpu-check: bench/gpu.py exited $brc"; rc=1; }

echo "== gpu-check: rc $rc after $(($(date +%s) - start))s of ${budget}s; results in $out"
ls -l "$out"
exit "$rc"

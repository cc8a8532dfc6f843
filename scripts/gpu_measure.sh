#!/usr/bin/env bash
# scripts/gpu_measure.sh -- build the measurement harness on the lent GPU machine and run the GPU
# sweep, writing measured rows under $OUT (docs/measurement.md, "On the GPU machine").
#
# Run from the repository root, in ONE device call (the machine keeps nothing once it goes idle):
#     bash scripts/gpu_measure.sh
# with the Debian .debs carried in .debs/ (see docs/measurement.md for the list). What it does:
#   1. records the machine (nvidia-smi, torch, CUDA, ABI, protobuf exports) in $OUT/env.txt;
#   2. unpacks .debs/*.deb into $DEPS (protobuf, ONNX, fmt, nlohmann-json, CLI11, Eigen, Boost's
#      headers);
#   3. configures and builds memest-measure and memest-zoo with the pip LibTorch (CUDA on,
#      sm_90), protobuf before ONNX before Torch, into $BUILD;
#   4. smoke-tests one CUDA row ($OUT/smoke.jsonl);
#   5. regenerates the generated models the manifest names and lacks (memest-zoo);
#   6. runs the sweep: rows go to $OUT/rows.jsonl, seeded from $PREVIOUS_ROWS so a later call
#      resumes where this one stopped (--time-budget keeps each call under the device limit).
#
# Settings (environment):
#   OUT             where results go (set by the device tool; default ./out)
#   MANIFEST        sweep manifest (default datasets/manifests/gpu-h100.jsonl)
#   PREVIOUS_ROWS   rows of earlier calls to resume from (default datasets/measured/gpu-h100.jsonl)
#   TIME_BUDGET     seconds after which the sweep starts no new row (default 420)
#   ROW_TIMEOUT     seconds before one configuration is killed (default 300)
#   DEPS            prefix the .debs are unpacked into (default /opt/memest-deps)
#   BUILD           build folder (default build-gpu; kept between calls while the machine is warm)
#   JOBS            build parallelism (default: all cores)
#   MEMEST_GIT_COMMIT  commit recorded in the rows (default: git rev-parse HEAD, else "unknown")
#   LIMIT           only the first N configurations (default: all)
#   SKIP_SWEEP=1    build and smoke-test only
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/out}
MANIFEST=${MANIFEST:-datasets/manifests/gpu-h100.jsonl}
PREVIOUS_ROWS=${PREVIOUS_ROWS:-datasets/measured/gpu-h100.jsonl}
TIME_BUDGET=${TIME_BUDGET:-420}
ROW_TIMEOUT=${ROW_TIMEOUT:-300}
DEPS=${DEPS:-/opt/memest-deps}
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LIMIT=${LIMIT:-0}
mkdir -p "$OUT"
LOG="$OUT/gpu_measure.log"
exec > >(tee -a "$LOG") 2>&1
say() { echo "[gpu_measure $(date -u +%H:%M:%S)] $*"; }
die() { say "ERROR: $*"; exit 1; }

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || die "no python3 (the pip torch lives there)"

# --- 1. the machine ------------------------------------------------------------------------------
say "recording the environment in $OUT/env.txt"
{
  echo "== nvidia-smi"; nvidia-smi || true
  echo "== nvcc"; (command -v nvcc && nvcc --version) || ls /usr/local/cuda/bin/nvcc || true
  echo "== torch"
  "$PYTHON" - <<'EOF' || true
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("cxx11_abi", torch.compiled_with_cxx11_abi())
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
inc = os.path.join(os.path.dirname(torch.__file__), "include")
print("torch include has google/protobuf:", os.path.isdir(os.path.join(inc, "google", "protobuf")))
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, p.total_memory, f"{p.major}.{p.minor}")
EOF
  echo "== protobuf symbols exported by libtorch_cpu.so"
  TORCH_LIB=$("$PYTHON" -c 'import os,torch;print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
  (nm -D --defined-only "$TORCH_LIB/libtorch_cpu.so" 2>/dev/null | grep -c '_ZN6google8protobuf') || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

ABI=$("$PYTHON" -c 'import torch;print(int(torch.compiled_with_cxx11_abi()))')
[ "$ABI" = "1" ] || die "this LibTorch uses the pre-C++11 std::string ABI; the Debian .debs (protobuf, ONNX) use the C++11 ABI: they cannot be linked together"
TORCH_PREFIX=$("$PYTHON" -c 'import torch;print(torch.utils.cmake_prefix_path)')

# --- 2. Debian dependencies ----------------------------------------------------------------------
if ! ls .debs/*.deb >/dev/null 2>&1; then
  die "no .debs/*.deb in the checkout: carry them (docs/measurement.md lists the packages)"
fi
if [ ! -f "$DEPS/.unpacked" ]; then
  say "unpacking $(ls .debs/*.deb | wc -l) .debs into $DEPS"
  mkdir -p "$DEPS"
  for f in .debs/*.deb; do dpkg -x "$f" "$DEPS"; done
  touch "$DEPS/.unpacked"
fi
MULTIARCH=x86_64-linux-gnu
export LD_LIBRARY_PATH="$DEPS/usr/lib/$MULTIARCH:$DEPS/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$DEPS/usr/bin:/usr/local/cuda/bin:$PATH"
for need in usr/include/google/protobuf usr/include/onnx usr/include/nlohmann usr/include/fmt \
            usr/include/CLI usr/include/eigen3 usr/include/boost/container; do
  [ -e "$DEPS/$need" ] || die "$DEPS/$need is missing: a .deb is not carried (docs/measurement.md)"
done

# --- 3. build ------------------------------------------------------------------------------------
COMMIT=${MEMEST_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
say "configuring $BUILD (commit $COMMIT)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMEMEST_BUILD_TESTS=OFF -DMEMEST_BUILD_BENCH=OFF \
  -DMEMEST_WITH_TORCH=ON -DMEMEST_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DMEMEST_GIT_COMMIT="$COMMIT" \
  -DCMAKE_PREFIX_PATH="$DEPS/usr;$DEPS/usr/lib/$MULTIARCH/cmake;$DEPS/usr/share;$TORCH_PREFIX" \
  > "$OUT/cmake.log" 2>&1 || { tail -60 "$OUT/cmake.log"; die "cmake failed ($OUT/cmake.log)"; }
grep -q "measurement harness with CUDA" "$OUT/cmake.log" || {
  tail -60 "$OUT/cmake.log"
  die "LibTorch or CUDA was not found: the harness would not be built with CUDA ($OUT/cmake.log)"
}
say "building memest-measure and memest-zoo with $JOBS jobs"
ninja -C "$BUILD" -j"$JOBS" memest-measure memest-zoo > "$OUT/build.log" 2>&1 || {
  grep -E "error|FAILED" -A5 "$OUT/build.log" | head -80; die "build failed ($OUT/build.log)"; }
MEASURE="$BUILD/tools/memest-measure"
ZOO="$BUILD/datasets/memest-zoo"

# --- 4. smoke test -------------------------------------------------------------------------------
say "smoke test: mlp_small_train at batch 8 on cuda"
"$MEASURE" datasets/models/mlp_small_train.onnx --batch 8 --device cuda --family mlp \
  > "$OUT/smoke.jsonl" || die "the CUDA smoke test failed (see above)"
cat "$OUT/smoke.jsonl"
[ "${SKIP_SWEEP:-0}" = "1" ] && { say "SKIP_SWEEP=1: done"; exit 0; }

# --- 5. models the manifest needs ----------------------------------------------------------------
[ -f "$MANIFEST" ] || die "no manifest $MANIFEST"
MISSING=$("$PYTHON" - "$MANIFEST" <<'EOF'
import json, os, sys
missing = set()
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        path = json.loads(line)["model"]
        if not os.path.exists(path):
            missing.add(path)
print("\n".join(sorted(missing)))
EOF
)
if [ -n "$MISSING" ]; then
  say "$(echo "$MISSING" | wc -l) manifest models are missing; regenerating with memest-zoo"
  # shellcheck source=scripts/regenerate_models.sh
  source scripts/regenerate_models.sh
  regenerate_models "$ZOO" "$MISSING"
fi
"$PYTHON" - "$MANIFEST" <<'EOF' || die "manifest models are still missing or differ"
import hashlib, json, os, sys
bad = 0
for n, line in enumerate(open(sys.argv[1]), 1):
    line = line.strip()
    if not line:
        continue
    cfg = json.loads(line)
    path = cfg["model"]
    if not os.path.exists(path):
        print(f"line {n}: {path} is missing"); bad += 1; continue
    want = cfg.get("sha256")
    if want and hashlib.sha256(open(path, "rb").read()).hexdigest() != want:
        print(f"line {n}: {path} differs from the manifest's sha256 (regenerated with another build?)")
sys.exit(1 if bad else 0)
EOF

# --- 6. the sweep --------------------------------------------------------------------------------
ROWS="$OUT/rows.jsonl"
if [ -f "$PREVIOUS_ROWS" ] && [ ! -f "$ROWS" ]; then
  cp "$PREVIOUS_ROWS" "$ROWS"
  say "resuming from $PREVIOUS_ROWS ($(wc -l < "$ROWS") rows)"
fi
say "sweep $MANIFEST -> $ROWS (time budget ${TIME_BUDGET}s)"
EXTRA=()
[ "$LIMIT" != "0" ] && EXTRA+=(--limit "$LIMIT")
"$MEASURE" --sweep "$MANIFEST" --out "$ROWS" --device cuda --row-timeout "$ROW_TIMEOUT" \
  --time-budget "$TIME_BUDGET" "${EXTRA[@]}"
"$PYTHON" - "$ROWS" "$MANIFEST" <<'EOF'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
total = sum(1 for l in open(sys.argv[2]) if l.strip())
print(f"{len(rows)} rows for {total} manifest lines:", dict(collections.Counter(r["status"] for r in rows)))
EOF
say "done: copy $ROWS to $PREVIOUS_ROWS in the checkout to resume in a later call"

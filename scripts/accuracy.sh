#!/usr/bin/env bash
# Regenerates docs/accuracy.md and docs/accuracy/*.svg: builds memest-eval if needed, then scores
# every available backend against GPUMemNet's 6,000 A100 rows (rebuilt in memory by the
# datasets/gpumemnet importer) and every committed measured row (datasets/measured/**/*.jsonl,
# when that folder exists).
#
#   bash scripts/accuracy.sh                 # the full page
#   bash scripts/accuracy.sh --sample 500    # extra arguments go to memest-eval (quick look)
#
# Environment: MEMEST_BUILD_DIR (default build), MEMEST_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${MEMEST_BUILD_DIR:-build}"
jobs="${MEMEST_JOBS:-$(nproc)}"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
ninja -C "$build" -j"$jobs" memest-eval memest-zoo >/dev/null

# Measured rows name their model files; generated ones (datasets/generated/, not committed) are
# made again with the seeds the rows were measured on. A row whose model is still missing stops
# the script: a page silently scored on fewer rows is a different page.
missing_models() {
  grep -ho '"path":"[^"]*\.onnx"' datasets/measured/**/*.jsonl datasets/measured/*.jsonl \
    2>/dev/null | sed 's/"path":"//; s/"$//' | sort -u | while read -r m; do
    [[ -f "$m" ]] || echo "$m"
  done
}
shopt -s globstar nullglob
inputs=(--gpumemnet)
if [[ -d datasets/measured ]]; then
  if missing_models | grep -q '^datasets/generated/tiny/'; then
    echo "accuracy.sh: generating datasets/generated/tiny (memest-zoo, seed 1)" >&2
    "$build/datasets/memest-zoo" --family all --scale tiny --count 6 --seed 1 \
      --out datasets/generated/tiny >/dev/null
  fi
  if missing_models | grep -q '^datasets/generated/zoo/'; then
    echo "accuracy.sh: generating datasets/generated/zoo (memest-zoo, seed 1)" >&2
    "$build/datasets/memest-zoo" --family all --scale full --count 40 --seed 1 \
      --out datasets/generated/zoo >/dev/null
  fi
  still_missing=$(missing_models)
  if [[ -n "$still_missing" ]]; then
    echo "accuracy.sh: measured rows name models that are missing; refusing to write a page" \
         "scored on fewer rows:" >&2
    echo "$still_missing" >&2
    exit 1
  fi
  inputs+=(--rows datasets/measured)
fi
mkdir -p docs/accuracy
rm -f docs/accuracy/*.svg
"$build/tools/memest-eval" "${inputs[@]}" --doc --command "bash scripts/accuracy.sh" \
  --out docs/accuracy.md --plots docs/accuracy "$@"
echo "wrote docs/accuracy.md and docs/accuracy/*.svg" >&2

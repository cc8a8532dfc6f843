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
# shellcheck source=scripts/regenerate_models.sh
source scripts/regenerate_models.sh
shopt -s globstar nullglob
inputs=(--gpumemnet)
if [[ -d datasets/measured ]]; then
  regenerate_models "$build/datasets/memest-zoo" "$(missing_models)"
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
# Rows measured on the H200 are predicted with the stack measured on that machine
# (docs/stacks.md); GPUMemNet's A100 rows keep the default stack, as they always have.
"$build/tools/memest-eval" "${inputs[@]}" --stack h200-141gb=h200-pytorch2.11-lazy --doc \
  --command "bash scripts/accuracy.sh" --out docs/accuracy.md --plots docs/accuracy "$@"
echo "wrote docs/accuracy.md and docs/accuracy/*.svg" >&2

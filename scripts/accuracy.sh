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
ninja -C "$build" -j"$jobs" memest-eval >/dev/null

inputs=(--gpumemnet)
if [[ -d datasets/measured ]]; then
  inputs+=(--rows datasets/measured)
fi
mkdir -p docs/accuracy
rm -f docs/accuracy/*.svg
"$build/tools/memest-eval" "${inputs[@]}" --doc --command "bash scripts/accuracy.sh" \
  --out docs/accuracy.md --plots docs/accuracy "$@"
echo "wrote docs/accuracy.md and docs/accuracy/*.svg" >&2

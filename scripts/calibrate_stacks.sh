#!/usr/bin/env bash
# scripts/calibrate_stacks.sh -- fits the stacks memest ships from public measurements and writes
# the device-level accuracy page. One command; the figures in docs/accuracy-device.md come from it.
#
#   1. builds memest and memest-zoo (build/, under /tmp/memest-build.lock);
#   2. timm on an A100-40GB (datasets/timm-a100/, 81 models, 53 families): unpacks the graphs,
#      rewrites jobs.csv from rows.csv, and runs `memest calibrate` (held out: leave one family out);
#   3. GPUMemNet's MLPs on an A100-40GB (datasets/gpumemnet/): rebuilds the 6,000 graphs and rows
#      with memest-zoo, turns them into jobs, calibrates (held out: leave one architecture out);
#   4. scripts/stacks_report.py puts both stacks into core/stacks.json (the hand-written stacks
#      stay first) and writes docs/accuracy-device.md: before/after calibration, held out, with
#      FakeTensor's published estimate on the same timm rows beside memest's.
# Work files go to build/stacks/. Rebuild afterwards to compile the new stacks in.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build/stacks
mkdir -p "$OUT"
flock /tmp/memest-build.lock cmake -S . -B build -G Ninja >/dev/null
flock /tmp/memest-build.lock ninja -C build -j"${MEMEST_BUILD_JOBS:-2}" memest-cli memest-zoo >/dev/null
MEMEST=build/tools/memest

echo "== timm-a100"
datasets/timm-a100/unpack.sh
/usr/bin/python3 datasets/timm-a100/make_jobs.py
"$MEMEST" calibrate datasets/timm-a100/jobs.csv -o "$OUT/a100-40gb-timm.json" --gpu a100-40gb \
  --name a100-40gb-timm \
  --display-name "timm 1.0.9 training (Adam, fp32, fused SDPA) on an A100-SXM4-40GB, PyTorch 2.x of Oct 2024; calibrated on 81 published models" \
  --data-name "datasets/timm-a100/jobs.csv (GPUMemNet's FakeTensor table, developers' half)" \
  --software "pytorch=2.x, at most 2.5 (the table dates from October 2024)" \
  --software "timm=1.0.9" --software "attention=F.scaled_dot_product_attention (timm default)" \
  --software "cudnn_benchmark=unknown" \
  --jobs-out "$OUT/a100-40gb-timm.jobs.csv" -q

echo "== GPUMemNet MLPs"
build/datasets/memest-zoo gpumemnet --out "$OUT/gpumemnet/rows.jsonl" \
  --write-models "$OUT/gpumemnet/models" >/dev/null
/usr/bin/python3 datasets/gpumemnet/make_jobs.py "$OUT/gpumemnet/rows.jsonl" \
  "$OUT/gpumemnet/models" "$OUT/gpumemnet/jobs.csv"
"$MEMEST" calibrate "$OUT/gpumemnet/jobs.csv" -o "$OUT/a100-40gb-gpumemnet.json" --gpu a100-40gb \
  --name a100-40gb-gpumemnet \
  --display-name "GPUMemNet's MLP training script (Adam, fp32) on an A100-SXM4-40GB; calibrated on 5,978 published rows" \
  --data-name "GPUMemNet MLP rows (datasets/gpumemnet, CC BY 4.0)" \
  --software "pytorch=unknown (GPUMemNet's 2024-25 runs)" --software "model=nn.Sequential MLPs" \
  --jobs-out "$OUT/a100-40gb-gpumemnet.jobs.csv" -q

echo "== core/stacks.json and docs/accuracy-device.md"
/usr/bin/python3 scripts/stacks_report.py "$OUT"

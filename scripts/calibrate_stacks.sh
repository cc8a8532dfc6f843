#!/usr/bin/env bash
# scripts/calibrate_stacks.sh -- fits the stacks memest ships from public measurements and writes
# the device-level accuracy page. One command; the figures in docs/accuracy-device.md come from it.
#
#   1. builds memest and memest-zoo (build/, under /tmp/memest-build.lock);
#   2. timm on an A100-40GB (datasets/timm-a100/, 81 models, 53 families): unpacks the graphs,
#      rewrites jobs.csv from rows.csv, and runs `memest calibrate` (held out: leave one family out);
#   3. GPUMemNet's MLPs on an A100-40GB (datasets/gpumemnet/): rebuilds the 6,000 graphs and rows
#      with memest-zoo, turns them into jobs, calibrates (held out: leave one architecture out);
#   4. our H200 rows (datasets/h200-torch211/): calibrated from the measured stack
#      h200-pytorch2.11-lazy (held out: leave one family out); our H100 rows
#      (datasets/h100-torch211/, the same software) are only scored, never fitted;
#   5. scripts/stacks_report.py puts both stacks into base/stacks.json (the hand-written stacks
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

echo "== timm and torchvision on an H200 (measured for this project)"
/usr/bin/python3 scripts/device_truth_jobs.py datasets/h200-torch211
/usr/bin/python3 scripts/device_truth_jobs.py datasets/h100-torch211
"$MEMEST" calibrate datasets/h200-torch211/jobs.csv -o "$OUT/h200-timm.json" --gpu h200-141gb \
  --base-stack h200-pytorch2.11-lazy --name h200-timm \
  --display-name "timm 1.0.29 and torchvision 0.26 training (Adam, fp32) on an H200, PyTorch 2.11 + CUDA 13.0 + cuDNN 9.19; calibrated on 83 models measured for this project" \
  --data-name "datasets/h200-torch211/jobs.csv (scripts/gpu_device_truth.py on a lent H200, 2026-11-26)" \
  --software "pytorch=2.11.0+cu130" --software "cudnn=9.19.0" --software "timm=1.0.29" \
  --software "attention=both: timm's F.scaled_dot_product_attention (auto) and eager rows" \
  --software "cudnn_benchmark=false" \
  --jobs-out "$OUT/h200-timm.jobs.csv" -q

echo "== base/stacks.json and docs/accuracy-device.md"
/usr/bin/python3 scripts/stacks_report.py "$OUT"

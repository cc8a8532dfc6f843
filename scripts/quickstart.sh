#!/usr/bin/env bash
# Quick start, command 1: install dependencies, build, and estimate a bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh memest-cli
./build/tools/memest datasets/models/resnet18_train.onnx --batch 64 --gpu h100-80gb

#!/usr/bin/env bash
# Configures and builds memest into ./build (Release with debug info). Extra args go to ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j"$(nproc)" "$@"

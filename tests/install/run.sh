#!/bin/bash
# tests/install/run.sh BUILD_DIR SOURCE_DIR -- installs memest from BUILD_DIR into a temporary
# prefix, then builds and runs two out-of-tree consumers against it: one with
# find_package(memest CONFIG) (C++ and C), one with pkg-config (C, plain cc). Exit 0 when all
# three build and run on the bundled MLP.
set -euo pipefail
BUILD=$1
SRC=$(cd "$2" && pwd)
MODEL=$SRC/datasets/models/mlp_small_train.onnx
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"
test -f "$TMP/prefix/include/memest/memest_c.h"
test -f "$TMP/prefix/include/memest/version.h"
# find_package: nothing but the prefix on the path (no ONNX, protobuf, fmt, CLI11 or Torch).
cmake -S "$SRC/tests/install" -B "$TMP/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  > "$TMP/configure.log"
cmake --build "$TMP/consumer" > "$TMP/build.log"
export LD_LIBRARY_PATH="$TMP/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$TMP/consumer/cxx_consumer" "$MODEL"
"$TMP/consumer/c_consumer_cmake" "$MODEL"
# pkg-config, from C with the system compiler.
PC_DIR=$(dirname "$(find "$TMP/prefix" -name memest.pc | head -1)")
FLAGS=$(PKG_CONFIG_PATH="$PC_DIR" pkg-config --cflags --libs memest)
cc -std=c99 -Wall -Werror "$SRC/tests/install/c_consumer.c" $FLAGS -o "$TMP/c_consumer_pc"
"$TMP/c_consumer_pc" "$MODEL"
# Rust, with plain rustc (Debian's `rustc`), when it is installed.
if command -v rustc > /dev/null; then
  rustc --edition 2021 -O "$SRC/tests/install/rust_consumer.rs" -L "$TMP/prefix/lib" \
    -l dylib=memest -o "$TMP/rust_consumer" 2> "$TMP/rustc.log" || { cat "$TMP/rustc.log"; exit 1; }
  "$TMP/rust_consumer" "$MODEL"
fi
# The Python package, when this build has it: its own install component, imported from the prefix.
if compgen -G "$BUILD/python/memest/_memest*.so" > /dev/null; then
  cmake --install "$BUILD" --component python --prefix "$TMP/py" > "$TMP/install-py.log"
  SITE=$(dirname "$(find "$TMP/py" -name __init__.py -path '*memest*' | head -1)")
  (cd "$TMP" && PYTHONPATH=$(dirname "$SITE") /usr/bin/python3 -c \
    "import memest; e = memest.estimate(memest.load('$MODEL'), batch=32); assert e.peak_device > 0; print('python', memest.__version__, e.peak_device)")
fi
echo "install test: consumers built and ran against $TMP/prefix"

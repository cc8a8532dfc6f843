#!/usr/bin/env bash
# Installs memest's build and test dependencies from Debian 12 packages (run as root).
# Skips apt entirely when everything is already installed.
set -euo pipefail
PACKAGES=(
  cmake ninja-build g++ pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler
  libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libboost-dev  # header-only: boost::container::small_vector for the graph's id lists (core/graph.h)
  libjemalloc-dev  # the CLI's allocator (tools/jemalloc_conf.cc)
  libonnx-testdata
  python3-dev python3-pybind11 python3-torch  # the Python module and its from_torch test (python/)
  rustc  # the C API from Rust (tests/install/rust_consumer.rs)
  libtorch-dev libopenblas0-pthread  # measurement harness (docs/measurement.md); OpenBLAS: 10x faster CPU matmuls
  slurmctld slurmd slurm-client munge  # SlurmTest.*: a real single-node Slurm (docs/slurm.md); never started as services
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "memest: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Packages with daemons (slurmctld, slurmd, munge) must not start them here: the tests start
  # their own, on their own ports. Where nothing says so yet (no policy-rc.d, as in a container),
  # deny service starts for the time of the install.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

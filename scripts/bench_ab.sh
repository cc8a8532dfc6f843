#!/usr/bin/env bash
# scripts/bench_ab.sh OLD_BENCH FILTER [MIN_TIME] [RUNS] -- compares two builds of memest_bench on
# a noisy machine: runs OLD_BENCH and ./build/bench/memest_bench alternately RUNS times (default
# 3) with the same --benchmark_filter and --benchmark_min_time (default 0.5), and prints, per
# benchmark, the best (lowest) CPU time of each and new/old. Alternating and keeping the best of
# each spreads the machine's slow phases over both binaries; quote the ratios, not the times.
#
#   cp build/bench/memest_bench /tmp/bench_old     # before the change
#   ... change, rebuild ...
#   scripts/bench_ab.sh /tmp/bench_old 'resnet50_train_symbolic$|MaxBatch' 0.5 3
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: scripts/bench_ab.sh OLD_BENCH FILTER [MIN_TIME] [RUNS]" >&2; exit 2; }
OLD=$1
FILTER=$2
MIN_TIME=${3:-0.5}
RUNS=${4:-3}
NEW=./build/bench/memest_bench
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for i in $(seq "$RUNS"); do
  for side in old new; do
    bin=$OLD
    [[ $side == new ]] && bin=$NEW
    "$bin" --benchmark_filter="$FILTER" --benchmark_min_time="$MIN_TIME" \
      --benchmark_format=json 2>/dev/null >"$OUT/$side.$i.json"
  done
done
python3 - "$OUT" <<'PY'
import collections, glob, json, os, sys
best = collections.defaultdict(lambda: float("inf"))
unit = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    side = os.path.basename(path).split(".")[0]
    for r in json.load(open(path))["benchmarks"]:
        best[(r["name"], side)] = min(best[(r["name"], side)], r["cpu_time"])
        unit[r["name"]] = r["time_unit"]
for name in sorted({n for n, _ in best}):
    old, new = best[(name, "old")], best[(name, "new")]
    print(f"{name:60s} old {old:10.2f} new {new:10.2f} {unit[name]:2s} new/old {new / old:.3f}")
PY

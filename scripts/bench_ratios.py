#!/usr/bin/python3
"""Runs the chain benchmarks once (bench/estimate_bench.cc) and prints their table as ratios.

    python3 scripts/bench_ratios.py [--bench build/bench/memest_bench] [--min-time 0.2]
    python3 scripts/bench_ratios.py --json run.json     # a saved --benchmark_format=json run

For each generated chain (10k, 100k, 1M nodes) one run gives the protobuf parse of its bytes,
load (parse, validation, symbolic shape inference), one analytical and one symbolic training
estimate; each is shown in ms, as a ratio to the parse of the same bytes, and per node (the per
node cost stays flat when no pass is worse than linear). The last two columns are issue 20's
target: (load + analytical estimate) / parse and (load + symbolic estimate) / parse. With
repetitions each benchmark's median over them is shown (this machine's slow phases move a single
repetition by 10-30 %).
"""
import argparse
import json
import statistics
import subprocess
import sys

SIZES = ["chain10k", "chain100k", "chain1m"]
ROWS = [("load", "BM_Load/{}"), ("analytical", "BM_Estimate/{}_train_analytical"),
        ("symbolic", "BM_Estimate/{}_train_symbolic")]


def run(bench, min_time):
    p = subprocess.run([bench, "--benchmark_filter=chain", f"--benchmark_min_time={min_time}",
                        "--benchmark_format=json"], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def ms(b):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    return b["real_time"] * scale


def medians(data):
    """Per benchmark name, one entry whose real_time is the median over its repetitions."""
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") == "iteration":
            runs.setdefault(b["name"], []).append(b)
    out = {}
    for name, bs in runs.items():
        m = dict(bs[0])
        m["real_time"] = statistics.median(x["real_time"] for x in bs)
        out[name] = m
    return out


def table(data):
    by_name = medians(data)
    print("| graph | parse ms | load ms (× parse) | analytical ms (× parse) | "
          "symbolic ms (× parse) | ns/node parse / load / analytical / symbolic | "
          "(load + analytical) / parse | (load + symbolic) / parse |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        parse = by_name.get(f"BM_ProtobufParse/{size}")
        if parse is None:
            continue
        nodes = parse.get("nodes", 0) or 1
        cells, per_node = [], [ms(parse) * 1e6 / nodes]
        times = {}
        for label, pattern in ROWS:
            b = by_name.get(pattern.format(size))
            if b is None:
                cells.append("–")
                continue
            times[label] = ms(b)
            cells.append(f"{ms(b):.1f} ({ms(b) / ms(parse):.2f})")
            per_node.append(ms(b) * 1e6 / nodes)
        targets = [(times.get("load", 0) + times.get(e, 0)) / ms(parse)
                   for e in ("analytical", "symbolic")]
        print(f"| {size} ({nodes:,.0f} nodes) | {ms(parse):.1f} | " + " | ".join(cells) +
              " | " + " / ".join(f"{x:.0f}" for x in per_node) + " | " +
              " | ".join(f"{t:.2f}" for t in targets) + " |")
    ctx = data.get("context", {})
    print(f"\n{ctx.get('date', '')}, {ctx.get('num_cpus', '?')} CPUs")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/bench/memest_bench")
    ap.add_argument("--min-time", default="0.2")
    ap.add_argument("--json", help="a saved --benchmark_format=json output instead of a run")
    a = ap.parse_args()
    data = json.load(open(a.json)) if a.json else run(a.bench, a.min_time)
    table(data)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Issue 20's ratios in instructions: counts that do not move with the machine.

    python3 scripts/bench_instructions.py [--build build] [--chains 2500,25000] [--skip-search]
        [--shapes fanout,concat,split,skips,outputs [--widths 4000,40000]]

Wall time on the 2-core build machine moves by up to half between runs (docs/speed-log.md), so a
ratio read from one Google Benchmark run can move too. Callgrind counts the instructions each
function runs, its callees included, and those are the same on every run of the same binary and
input. This script runs the memest CLI under `valgrind --tool=callgrind` and reads the inclusive
counts of the functions that make each figure (`callgrind_annotate --inclusive=yes`):

  * ResNet-50's symbolic `--max-batch` on h100-80gb (`memest::FindMaxBatch`) against one
    symbolic estimate at the batch it answers (`memest::Estimator::Run`);
  * Qwen2.5-0.5B's symbolic `--max-dim seq` at batch 4 on h100-80gb (`memest::FindMaxDim`) against
    one estimate at the length it answers;
  * the generated chains (`memest-zoo chain`, 4 nodes a block; 2,500 and 25,000 blocks are the
    10k and 100k chains of bench/estimate_bench.cc) at batch 64: the protobuf parse of the file
    onto the heap, as any ONNX tool parses it (`ParseFromString` in bench/parse_process.cc), the
    load with shape inference (`memest::LoadModel`: memest's own parse onto an arena,
    `Loader::Parse`, shown too, then the graph and its shapes) and each backend's training
    estimate, as ratios to the parse;
  * with --shapes, graphs of one shape each (`memest-zoo shape`, datasets/zoo/shapes.h) at each
    of --widths, the same figures: their instructions per node stay flat from one width to the
    next when no pass is worse than linear in that shape.

Neither the parse nor the load counts its teardown (the CLI exits without one); the benchmark's
BM_ProtobufParse also frees each proto it parsed, which on the 10k chain is 0.63 times the parse
again. Instructions are not time: the parse runs fewer instructions per cycle than the
estimates, so (load + estimate) / parse reads higher here than in wall time. Compare a change by
running this script on both binaries. Needs valgrind (not part of the test suite's dependencies).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FUNCTIONS = {
    "heap_parse": "google::protobuf::MessageLite::ParseFromString(",
    "parse": "memest::core::(anonymous namespace)::Loader::Parse(",
    "load": "memest::LoadModel(",
    "estimate": "memest::Estimator::Run(",
    "max_batch": "memest::FindMaxBatch(",
    "max_dim": "memest::FindMaxDim(",
}


def inclusive_counts(annotated):
    """The inclusive instruction count of each function of FUNCTIONS in callgrind_annotate's
    --inclusive=yes output (the largest where a function is listed under several file names)."""
    counts = {}
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(\S.*)$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        where = m.group(2)
        for key, name in FUNCTIONS.items():
            # "file:function(args) [binary]": the function's name follows the file's colon.
            if ":" + name in where or where.startswith(name):
                counts[key] = max(counts.get(key, 0), n)
    return counts


def callgrind(args, tmp):
    """Runs the CLI under callgrind; its stdout and the inclusive counts."""
    out = os.path.join(tmp, "callgrind.out")
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + args,
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"bench_instructions.py: {' '.join(args)} failed:\n{run.stderr[-2000:]}")
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                               capture_output=True, text=True, check=True).stdout
    return run.stdout, inclusive_counts(annotated)


def answer_of(stdout):
    """The searched value of a `--json` max-batch or max-dim run (its one result's)."""
    return int(json.loads(stdout)["results"][0]["max_batch"]["batch"])


def search_row(memest, what, model_args, search_args, key, at_answer, tmp):
    out, c = callgrind([memest] + model_args + search_args + ["--backend", "symbolic", "--json"],
                       tmp)
    answer = answer_of(out)
    _, e = callgrind([memest] + model_args + at_answer(answer) + ["--backend", "symbolic"], tmp)
    ratio = c[key] / e["estimate"]
    print(f"| {what} (answer {answer:,}) | {c[key]:,} | {e['estimate']:,} | {ratio:.2f} |")


def graph_row(memest, parse_process, label, path, nodes, tmp):
    """One graph's row: the heap parse of its file, memest's own parse, the load and each
    backend's training estimate at batch 64, as counts, ratios to the parse and per node."""
    _, p = callgrind([parse_process, path], tmp)
    counts = {}
    for backend in ("analytical", "symbolic"):
        _, c = callgrind([memest, path, "--batch", "64", "--backend", backend], tmp)
        counts[backend] = c
    parse = p["heap_parse"]
    own = counts["symbolic"]["parse"]
    load = counts["symbolic"]["load"]
    ana = counts["analytical"]["estimate"]
    sym = counts["symbolic"]["estimate"]
    print(f"| {label}, {nodes:,} nodes | {parse:,} | {own:,} ({own / parse:.2f}) | "
          f"{load:,} ({load / parse:.2f}) | {ana:,} ({ana / parse:.2f}) | "
          f"{sym:,} ({sym / parse:.2f}) | {(load + ana) / parse:.2f} | "
          f"{(load + sym) / parse:.2f} | {parse / nodes:,.0f} / {load / nodes:,.0f} / "
          f"{ana / nodes:,.0f} / {sym / nodes:,.0f} |")


def chain_row(memest, zoo, parse_process, blocks, tmp):
    path = os.path.join(tmp, f"chain{blocks}.onnx")
    subprocess.run([zoo, "chain", "--blocks", str(blocks), "--out", path], check=True,
                   capture_output=True)
    graph_row(memest, parse_process, "chain", path, 4 * blocks, tmp)


def shape_row(memest, zoo, parse_process, kind, width, tmp):
    """A graph of one shape (datasets/zoo/shapes.h); its node count from memest's own summary."""
    path = os.path.join(tmp, f"{kind}{width}.onnx")
    subprocess.run([zoo, "shape", "--kind", kind, "--width", str(width), "--out", path],
                   check=True, capture_output=True)
    summary = subprocess.run([memest, path, "--batch", "64", "--json"], capture_output=True,
                             text=True, check=True).stdout
    nodes = int(json.loads(summary)["model"]["nodes"])
    graph_row(memest, parse_process, f"{kind} of width {width:,}", path, nodes, tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--chains", default="2500,25000", help="blocks of each chain, comma-separated")
    ap.add_argument("--skip-search", action="store_true", help="the graphs' table only")
    ap.add_argument("--shapes", default="",
                    help="also graphs of these shapes (datasets/zoo/shapes.h: fanout, concat, "
                         "split, skips, outputs), comma-separated, at each of --widths")
    ap.add_argument("--widths", default="4000,40000", help="the shapes' widths, comma-separated")
    a = ap.parse_args()
    memest = os.path.join(a.build, "tools", "memest")
    zoo = os.path.join(a.build, "datasets", "memest-zoo")
    parse_process = os.path.join(a.build, "bench", "memest_parse_process")
    with tempfile.TemporaryDirectory() as tmp:
        if not a.skip_search:
            print("| search | its instructions | one estimate at the answer | estimates |")
            print("|---|---:|---:|---:|")
            resnet = [os.path.join(ROOT, "datasets/models/resnet50_train.onnx"), "--gpu",
                      "h100-80gb"]
            search_row(memest, "ResNet-50 `--max-batch`", resnet, ["--max-batch"], "max_batch",
                       lambda b: ["--batch", str(b)], tmp)
            qwen = ["--hf-config", os.path.join(ROOT, "tests/data/hf/qwen2.5-0.5b.json"), "--gpu",
                    "h100-80gb", "--batch", "4"]
            search_row(memest, "Qwen2.5-0.5B `--max-dim seq`", qwen, ["--max-dim", "seq"],
                       "max_dim", lambda s: ["--dim", f"seq={s}"], tmp)
            print()
        print("| graph | parse | memest's parse onto its arena (× parse) | load (× parse) | "
              "analytical (× parse) | symbolic (× parse) | (load + analytical) / parse | "
              "(load + symbolic) / parse | per node: parse / load / analytical / symbolic |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for blocks in filter(None, a.chains.split(",")):
            chain_row(memest, zoo, parse_process, int(blocks), tmp)
        for kind in filter(None, a.shapes.split(",")):
            for width in a.widths.split(","):
                shape_row(memest, zoo, parse_process, kind, int(width), tmp)


if __name__ == "__main__":
    main()

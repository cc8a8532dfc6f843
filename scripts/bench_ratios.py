#!/usr/bin/python3
"""Runs the chain benchmarks once (bench/estimate_bench.cc) and prints their table as ratios.

    python3 scripts/bench_ratios.py [--bench build/bench/memest_bench] [--min-time 0.2]
    python3 scripts/bench_ratios.py --json run.json     # a saved --benchmark_format=json run
    python3 scripts/bench_ratios.py --speed --json run.json   # README's Speed table

With --speed, the run is the Speed table's (`--benchmark_filter='resnet50|Queries|Threads|Process|qwen25'`,
saved with --benchmark_format=json) and its rows are printed as README shows them: ResNet-50's
load and estimates as ratios to its parse, each search to one estimate at batch 64 (seq 2,048)
and to one at the batch (seq) it answers, 1,000 queries per estimate, the threads' scaling, and
the CLI processes (on the chains also as ratios to the parse of the same file as a process).

For each generated chain (10k, 100k, 1M nodes) one run gives the protobuf parse of its bytes,
load (parse, validation, symbolic shape inference), one analytical and one symbolic training
estimate; each is shown in ms, as a ratio to the parse of the same bytes, and per node (the per
node cost stays flat when no pass is worse than linear). The last two columns are issue 20's
target: (load + analytical estimate) / parse and (load + symbolic estimate) / parse. When the run
has them (the filter `chain` takes them too), a second table gives the same as new processes:
the parse of the chain's file alone (memest_parse_process) and the memest CLI estimating it with
each backend (bench/queries_bench.cc), each as a ratio to that parse; and a third the same ratios
timed in the same rounds (bench/paired_bench.cc: each round parses, loads and runs one backend's
estimate, and each ratio is the median of the rounds' own, so the machine's slow phases cancel).
With repetitions each benchmark's median over them is shown, its time and its counters (this
machine's slow phases move a single repetition by 10-30 %).
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
    """Per benchmark name, one entry whose real_time and counters are the medians over its
    repetitions (the run's own median aggregate when it reported aggregates only)."""
    runs, aggregates = {}, {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") == "iteration":
            runs.setdefault(b["name"], []).append(b)
        elif b.get("aggregate_name") == "median":
            aggregates[b["run_name"]] = b
    out = dict(aggregates)
    for name, bs in runs.items():
        m = dict(bs[0])
        for key, value in bs[0].items():  # the time and every counter (the paired ratios')
            if isinstance(value, (int, float)) and all(key in x for x in bs):
                m[key] = statistics.median(x[key] for x in bs)
        out[name] = m
    return out


def set_rows(get):
    """BM_MaxBatchSet's rows (bench/search_set_bench.cc): every search of the `main` set against one
    estimate at its own answer; none when the run has not got it (its graphs not unpacked)."""
    rows = []
    for backend in ("symbolic", "analytical"):
        b = get(f"BM_MaxBatchSet/main_{backend}/iterations:1")
        if b is None or b.get("error_occurred"):
            continue
        # The largest's graph and GPU; an aggregate over repetitions that disagree has none.
        largest = b.get("label", "").removeprefix("largest: ")
        largest = f" ({largest})" if largest else ""
        rows.append((f"--max-batch, {backend}, over the {b['searches']:.0f} searches of the `main` "
                     f"set (timm-a100 and bundled graphs on 3 GPUs): each against one estimate at "
                     f"its answer, median / 90th percentile / largest{largest}", float("nan"),
                     f"{b['median_ratio']:.2f} / {b['p90_ratio']:.2f} / {b['max_ratio']:.1f} ×; "
                     f"all searches {b['ratio_of_sums']:.2f} × all those estimates "
                     f"({b['searches_ms']:,.0f} against {b['estimates_ms']:,.0f} ms)"))
    return rows


def speed_table(data):
    """README's Speed table: each row's time and its ratio, all from this one run."""
    by = medians(data)

    def get(name):
        b = by.get(name, by.get(name + "/real_time"))  # UseRealTime() names end so
        if b is None:
            print(f"(no {name} in this run)", file=sys.stderr)
        return b

    def t(name):
        b = get(name)
        return ms(b) if b else float("nan")

    def counter(name, key):
        b = get(name)
        return b.get(key, float("nan")) if b else float("nan")

    def plural(n, noun):
        return f"{n:.0f} {noun}" + ("" if n == 1 else "s")

    parse = t("BM_ProtobufParse/resnet50")
    est_a = t("BM_Estimate/resnet50_train_analytical")
    est_s = t("BM_Estimate/resnet50_train_symbolic")
    at_b = t("BM_EstimateAtMaxBatch/resnet50_symbolic")
    mb = "BM_MaxBatch/resnet50_symbolic"
    seq = t("BM_EstimateSeq/qwen25_05b_train_seq2048")
    at_s = t("BM_EstimateAtMaxSeq/qwen25_05b_train")
    ms_ = "BM_MaxSeq/qwen25_05b_train"
    seq_a = t("BM_EstimateSeq/qwen25_05b_train_seq2048_analytical")
    msa = "BM_MaxSeq/qwen25_05b_train_analytical"
    est_i = t("BM_Estimate/resnet50_infer_analytical")
    mbi = "BM_MaxBatch/resnet50_infer"
    seq_p = t("BM_EstimateSeq/qwen25_05b_prefill_seq2048_analytical")
    msp = "BM_MaxSeq/qwen25_05b_prefill_analytical"
    dec = t("BM_EstimatePast/qwen25_05b_decode_past2048")
    dec_at = t("BM_EstimatePast/qwen25_05b_decode_at_answer")
    mp = "BM_MaxPast/qwen25_05b_decode"
    dec_a = t("BM_EstimatePast/qwen25_05b_decode_past2048_analytical")
    mpa = "BM_MaxPast/qwen25_05b_decode_analytical"
    rows = [
        ("ResNet-50: protobuf parse", parse, "1 × parse"),
        ("ResNet-50: load", t("BM_Load/resnet50"), f"{t('BM_Load/resnet50') / parse:.2f} × parse"),
        ("estimate, analytical", est_a, f"{est_a / parse:.2f} × parse"),
        ("estimate, symbolic, batch 64", est_s, f"{est_s / parse:.2f} × parse"),
        ("same, --checkpoint 4", t("BM_Estimate/resnet50_train_symbolic_checkpoint4"),
         f"{t('BM_Estimate/resnet50_train_symbolic_checkpoint4') / parse:.2f} × parse"),
        (f"estimate, symbolic, at the answer (batch "
         f"{counter('BM_EstimateAtMaxBatch/resnet50_symbolic', 'batch'):.0f})", at_b,
         f"{at_b / est_s:.2f} × the estimate at batch 64"),
        (f"--max-batch symbolic ({plural(counter(mb, 'evaluations'), 'estimate')}, "
         f"{counter(mb, 'traces'):.0f} traces, {counter(mb, 'replays'):.0f} replays; answer "
         f"{counter(mb, 'max_batch'):.0f})", t(mb),
         f"{t(mb) / est_s:.1f} × the estimate at batch 64; {t(mb) / at_b:.2f} × the one at the answer"),
        ("same, exact search", t("BM_MaxBatch/resnet50_symbolic_exact"),
         f"{t('BM_MaxBatch/resnet50_symbolic_exact') / est_s:.1f} × the estimate at batch 64"),
        (f"--max-batch symbolic under ZeRO-2 over 4 ({counter('BM_MaxBatch/resnet50_symbolic_zero2x4', 'evaluations'):.0f} estimate, {counter('BM_MaxBatch/resnet50_symbolic_zero2x4', 'traces'):.0f} traces, "
         f"{counter('BM_MaxBatch/resnet50_symbolic_zero2x4', 'replays'):.0f} replays; answer {counter('BM_MaxBatch/resnet50_symbolic_zero2x4', 'max_batch'):.0f})",
         t("BM_MaxBatch/resnet50_symbolic_zero2x4"),
         f"{t('BM_MaxBatch/resnet50_symbolic_zero2x4_exact') / t('BM_MaxBatch/resnet50_symbolic_zero2x4'):.1f} × faster than its exact search"),
        (f"same, exact search ({counter('BM_MaxBatch/resnet50_symbolic_zero2x4_exact', 'evaluations'):.0f} estimates)",
         t("BM_MaxBatch/resnet50_symbolic_zero2x4_exact"), ""),
        (f"--max-batch analytical ({counter('BM_MaxBatch/resnet50', 'evaluations'):.0f} estimates)",
         t("BM_MaxBatch/resnet50"), f"{t('BM_MaxBatch/resnet50') / est_a:.1f} × one estimate"),
        *set_rows(get),
        ("Qwen2.5-0.5B estimate at seq 2,048", seq, "1 ×"),
        (f"same at the answer (seq {counter('BM_EstimateAtMaxSeq/qwen25_05b_train', 'seq'):.0f})",
         at_s, f"{at_s / seq:.2f} ×"),
        (f"--max-dim seq by replay ({counter(ms_, 'traces'):.0f} traces, "
         f"{counter(ms_, 'replays'):.0f} replays)", t(ms_),
         f"{t(ms_) / seq:.1f} × the estimate at 2,048; {t(ms_) / at_s:.1f} × the one at the answer"),
        ("same, exact search", t("BM_MaxSeq/qwen25_05b_train_exact"),
         f"{t('BM_MaxSeq/qwen25_05b_train_exact') / seq:.1f} × the estimate at 2,048"),
        ("Qwen2.5-0.5B analytical estimate at seq 2,048", seq_a, "1 ×"),
        (f"--max-dim seq analytical ({plural(counter(msa, 'evaluations'), 'estimate')}; answer "
         f"{counter(msa, 'max_seq'):.0f})", t(msa), f"{t(msa) / seq_a:.1f} × one estimate"),
        ("ResNet-50 inference estimate, analytical, batch 64", est_i, f"{est_i / parse:.2f} × parse"),
        (f"--max-batch --mode infer analytical ({plural(counter(mbi, 'evaluations'), 'estimate')}; "
         f"answer {counter(mbi, 'max_batch'):.0f})", t(mbi), f"{t(mbi) / est_i:.1f} × one estimate"),
        ("Qwen2.5-0.5B decode step after its prefill, symbolic, batch 16, `a100-40gb`: one estimate at past 2,048", dec, "1 ×"),
        (f"same at the answer (past {counter('BM_EstimatePast/qwen25_05b_decode_at_answer', 'past'):,.0f})",
         dec_at, f"{dec_at / dec:.2f} ×"),
        (f"its --max-dim past by replay ({plural(counter(mp, 'evaluations'), 'estimate')}, "
         f"{counter(mp, 'traces'):.0f} traces, {counter(mp, 'replays'):.0f} replays)", t(mp),
         f"{t(mp) / dec:.1f} × the estimate at 2,048; {t(mp) / dec_at:.1f} × the one at the answer"),
        (f"same, exact search ({counter(mp + '_exact', 'evaluations'):.0f} estimates)", t(mp + "_exact"),
         f"{t(mp + '_exact') / dec:.1f} × the estimate at 2,048"),
        ("the same decode step alone, analytical: one estimate at past 2,048", dec_a, "1 ×"),
        (f"its --max-dim past analytical ({plural(counter(mpa, 'evaluations'), 'estimate')}; answer "
         f"{counter(mpa, 'max_past'):,.0f})", t(mpa), f"{t(mpa) / dec_a:.1f} × one estimate"),
        ("Qwen2.5-0.5B prefill, analytical estimate at seq 2,048", seq_p, "1 ×"),
        (f"its --max-dim seq analytical ({plural(counter(msp, 'evaluations'), 'estimate')}; answer "
         f"{counter(msp, 'max_seq'):.0f})", t(msp), f"{t(msp) / seq_p:.1f} × one estimate"),
    ]
    for name, est in (("analytical", est_a), ("symbolic", est_s)):
        for order in ("grouped", "shuffled"):
            q = t(f"BM_Queries/resnet50_{name}_{order}")
            rows.append((f"1,000 queries, {name}, {order}", q,
                         f"{q / 1000 / est:.2f} × one estimate each"))
    ips = [counter(f"BM_EstimateThreads/resnet50_symbolic/real_time/threads:{n}",
                   "items_per_second") for n in (1, 2, 4)]
    rows.append(("symbolic estimates per second, 1 / 2 / 4 threads",
                 float("nan"), " / ".join(f"{x:,.0f}" for x in ips) +
                 f"; {ips[1] / ips[0]:.2f} × at 2 threads"))
    for label, name in (("cold start, --batch 64", "BM_CliProcess/cold_start_resnet50_batch64"),
                        ("cold start, --version", "BM_CliProcess/cold_start_version_only"),
                        ("cold start, Qwen2.5-0.5B --hf-config, seq 2,048",
                         "BM_CliProcess/cold_start_hf_qwen25_05b_seq2048")):
        rows.append((label, t(name), ""))
    for size, nodes in (("10k", 1e4), ("100k", 1e5), ("1m", 1e6)):
        a = t(f"BM_CliProcessChain/cold_chain{size}_analytical")
        y = t(f"BM_CliProcessChain/cold_chain{size}_symbolic")
        p = t(f"BM_ParseProcessChain/cold_chain{size}_parse")
        rows.append((f"CLI on chain{size}, analytical / symbolic", float("nan"),
                     f"{a:,.1f} / {y:,.1f} ms; {a * 1e3 / nodes:.1f} / {y * 1e3 / nodes:.1f} µs per node; "
                     f"{a / p:.2f} / {y / p:.2f} × the parse as a process ({p:,.1f} ms)"))
    print("| what | time | ratio |\n|---|---:|---:|")
    for name, time, ratio in rows:
        cell = "" if time != time else (f"{time:.3f} ms" if time < 10 else f"{time:.1f} ms")
        print(f"| {name} | {cell} | {ratio} |")
    ctx = data.get("context", {})
    print(f"\n{ctx.get('date', '')}, {ctx.get('num_cpus', '?')} CPUs")


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
    paired_table(by_name)
    process_table(by_name)
    ctx = data.get("context", {})
    print(f"\n{ctx.get('date', '')}, {ctx.get('num_cpus', '?')} CPUs")


def paired_table(by_name):
    """The same ratios timed in the same rounds, when the run has them (bench/paired_bench.cc):
    each round parses the chain, loads it and runs one backend's estimate, and each ratio is the
    median of the rounds' own, so a slow phase of the machine reaches the parse and what it is
    compared with alike. Parse and load are the analytical benchmark's (the symbolic one times
    its own, in its (load + symbolic) / parse)."""
    def cell(b, key, fmt):  # blank where the run lacks that backend's row
        return "–" if b is None else format(b[key], fmt)

    rows = []
    for size in SIZES:
        a = by_name.get(f"BM_ChainPaired/{size}_analytical")
        s = by_name.get(f"BM_ChainPaired/{size}_symbolic")
        if a is None and s is None:
            continue
        first = a if a is not None else s
        rows.append(f"| {size} | {cell(a, 'rounds', '.0f')} / {cell(s, 'rounds', '.0f')} | "
                    f"{first['parse_ms']:.1f} | {first['load_ms']:.1f} | {first['load_x']:.2f} | "
                    f"{cell(a, 'estimate_x', '.2f')} | {cell(s, 'estimate_x', '.2f')} | "
                    f"{cell(a, 'load_estimate_x', '.2f')} | {cell(s, 'load_estimate_x', '.2f')} |")
    if rows:
        print("\n| graph, timed in the same rounds | rounds (analytical / symbolic) | parse ms | "
              "load ms | load / parse | analytical / parse | symbolic / parse | "
              "(load + analytical) / parse | (load + symbolic) / parse |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(rows))


def process_table(by_name):
    """The same as new processes, when the run has them (bench/queries_bench.cc): the protobuf
    parse of the chain's file alone (memest_parse_process) and the memest CLI estimating it with
    each backend, each process's page faults included."""
    def get(name):  # UseRealTime() names end in /real_time
        return by_name.get(name + "/real_time", by_name.get(name))

    rows = []
    for size in SIZES:
        parse = get(f"BM_ParseProcessChain/cold_{size}_parse")
        cli = [get(f"BM_CliProcessChain/cold_{size}_{e}") for e in ("analytical", "symbolic")]
        if parse is None or None in cli:
            continue
        rows.append(f"| {size} | {ms(parse):,.1f} | " +
                    " | ".join(f"{ms(c):,.1f} ({ms(c) / ms(parse):.2f})" for c in cli) + " |")
    if rows:
        print("\n| graph, as a new process | parse alone ms | memest, analytical ms (× parse) | "
              "memest, symbolic ms (× parse) |\n|---|---:|---:|---:|")
        print("\n".join(rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/bench/memest_bench")
    ap.add_argument("--min-time", default="0.2")
    ap.add_argument("--json", help="a saved --benchmark_format=json output instead of a run")
    ap.add_argument("--speed", action="store_true",
                    help="print README's Speed table from --json (a run of its filter)")
    a = ap.parse_args()
    if a.speed:
        if not a.json:
            ap.error("--speed reads a saved run: give --json")
        speed_table(json.load(open(a.json)))
        return
    data = json.load(open(a.json)) if a.json else run(a.bench, a.min_time)
    table(data)


if __name__ == "__main__":
    sys.exit(main())

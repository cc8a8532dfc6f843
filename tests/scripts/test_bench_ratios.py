"""scripts/bench_ratios.py: the chains' table and README's Speed table, read from saved Google
Benchmark JSON runs (made up here, with known times)."""
import contextlib
import io
import pathlib
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_ratios  # noqa: E402


def median(name, ms, **counters):
    """A --benchmark_report_aggregates_only entry: the median over the repetitions."""
    return dict(name=name + "_median", run_name=name, run_type="aggregate", aggregate_name="median",
                real_time=ms, time_unit="ms", **counters)


def iteration(name, ms, **counters):
    return dict(name=name, run_name=name, run_type="iteration", real_time=ms, time_unit="ms",
                **counters)


def printed(fn, data):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        fn(data)
    return out.getvalue()


class SpeedTableTest(unittest.TestCase):
    def run_of(self):
        b = [
            median("BM_ProtobufParse/resnet50", 0.5),
            median("BM_Load/resnet50", 1.0),
            median("BM_Estimate/resnet50_train_analytical", 0.05),
            median("BM_Estimate/resnet50_train_symbolic", 1.0),
            median("BM_Estimate/resnet50_train_symbolic_checkpoint4", 1.25),
            median("BM_EstimateAtMaxBatch/resnet50_symbolic", 2.5, batch=966),
            median("BM_MaxBatch/resnet50_symbolic", 6.0, evaluations=1, traces=3, replays=4,
                   max_batch=966),
            median("BM_MaxBatch/resnet50_symbolic_exact", 15.0, evaluations=10, max_batch=966),
            median("BM_MaxBatch/resnet50", 0.3, evaluations=6, max_batch=877),
            median("BM_EstimateSeq/qwen25_05b_train_seq2048", 4.0),
            median("BM_EstimateAtMaxSeq/qwen25_05b_train", 6.0, seq=2214),
            median("BM_MaxSeq/qwen25_05b_train", 20.0, traces=4, replays=4),
            median("BM_MaxSeq/qwen25_05b_train_exact", 80.0),
            median("BM_EstimatePast/qwen25_05b_decode_past2048", 1.25, past=2048),
            median("BM_EstimatePast/qwen25_05b_decode_at_answer", 1.5, past=3811),
            median("BM_MaxPast/qwen25_05b_decode", 7.5, evaluations=1, traces=4, replays=7,
                   max_past=3811),
            median("BM_MaxPast/qwen25_05b_decode_exact", 30.0, evaluations=19, max_past=3811),
            dict(median("BM_MaxBatchSet/main_symbolic/iterations:1", 6000.0, searches=255,
                        median_ratio=3.456, p90_ratio=5.5, max_ratio=12.44, ratio_of_sums=3.5,
                        searches_ms=1540.0, estimates_ms=440.0),
                 label="largest: mlp_small_train.onnx a100-80gb"),
        ]
        for backend, per_query in (("analytical", 0.025), ("symbolic", 0.4)):
            for order in ("grouped", "shuffled"):
                b.append(median(f"BM_Queries/resnet50_{backend}_{order}", per_query * 1000))
        for n, ips in ((1, 1000), (2, 1900), (4, 1850)):
            b.append(median(f"BM_EstimateThreads/resnet50_symbolic/real_time/threads:{n}", 1.0,
                            items_per_second=ips))
        # The process benchmarks run with UseRealTime(): their names end in /real_time.
        b.append(median("BM_CliProcess/cold_start_resnet50_batch64/real_time", 7.0))
        b.append(median("BM_CliProcess/cold_start_version_only/real_time", 5.0))
        b.append(median("BM_CliProcess/cold_start_hf_qwen25_05b_seq2048/real_time", 15.0))
        for size, ms in (("10k", 30), ("100k", 300), ("1m", 3000)):
            b.append(median(f"BM_CliProcessChain/cold_chain{size}_analytical/real_time", ms))
            b.append(median(f"BM_CliProcessChain/cold_chain{size}_symbolic/real_time", 2 * ms))
            b.append(median(f"BM_ParseProcessChain/cold_chain{size}_parse/real_time", ms / 4))
        return {"benchmarks": b, "context": {"date": "today", "num_cpus": 2}}

    def test_each_search_against_an_estimate_at_batch_64_and_at_its_answer(self):
        text = printed(bench_ratios.speed_table, self.run_of())
        self.assertIn("| 2.00 × parse |", text)  # load
        self.assertIn("at the answer (batch 966) | 2.500 ms | 2.50 × the estimate at batch 64 |",
                      text)
        self.assertIn("answer 966) | 6.000 ms | 6.0 × the estimate at batch 64; 2.40 × the one at "
                      "the answer |", text)
        self.assertIn("| 15.0 ms | 15.0 × the estimate at batch 64 |", text)
        self.assertIn("(6 estimates) | 0.300 ms | 6.0 × one estimate |", text)
        self.assertIn("| 20.0 ms | 5.0 × the estimate at 2,048; 3.3 × the one at the answer |",
                      text)
        self.assertIn("same at the answer (past 3,811) | 1.500 ms | 1.20 × |", text)
        self.assertIn("(1 estimate, 4 traces, 7 replays) | 7.500 ms | 6.0 × the estimate at "
                      "2,048; 5.0 × the one at the answer |", text)
        self.assertIn("exact search (19 estimates) | 30.0 ms | 24.0 × the estimate at 2,048 |",
                      text)
        self.assertIn("| 0.50 × one estimate each |", text)  # 25 µs of a 50 µs estimate
        self.assertIn("1,000 / 1,900 / 1,850; 1.90 × at 2 threads", text)
        self.assertIn("30.0 / 60.0 ms; 3.0 / 6.0 µs per node; 4.00 / 8.00 × the parse as a process "
                      "(7.5 ms)", text)
        self.assertIn("| cold start, --batch 64 | 7.000 ms |", text)
        self.assertIn("| cold start, Qwen2.5-0.5B --hf-config, seq 2,048 | 15.0 ms |", text)

    def test_a_set_of_searches_against_an_estimate_at_each_answer(self):
        text = printed(bench_ratios.speed_table, self.run_of())
        self.assertIn("--max-batch, symbolic, over the 255 searches of the `main` set", text)
        self.assertIn("largest (mlp_small_train.onnx a100-80gb) |  | 3.46 / 5.50 / 12.4 ×; "
                      "all searches 3.50 × all those estimates (1,540 against 440 ms) |", text)
        # Not in the run (the timm graphs not unpacked): no row, where the others stay.
        run = self.run_of()
        run["benchmarks"] = [b for b in run["benchmarks"]
                             if not b["run_name"].startswith("BM_MaxBatchSet")]
        text = printed(bench_ratios.speed_table, run)
        self.assertNotIn("searches of the `main` set", text)
        self.assertIn("| 15.0 ms | 15.0 × the estimate at batch 64 |", text)

    def test_a_missing_benchmark_is_said_and_left_blank(self):
        run = self.run_of()
        run["benchmarks"] = [b for b in run["benchmarks"]
                             if b["run_name"] != "BM_EstimateAtMaxBatch/resnet50_symbolic"]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            bench_ratios.speed_table(run)
        self.assertIn("no BM_EstimateAtMaxBatch/resnet50_symbolic", err.getvalue())


class ChainTableTest(unittest.TestCase):
    def test_ratios_to_the_parse_and_the_issue_targets(self):
        b = []
        for rep in range(3):  # medians over repetitions: 10, 20 (twice), 60 -> 20
            b.append(iteration("BM_ProtobufParse/chain10k", 10.0, nodes=10000))
            b.append(iteration("BM_Load/chain10k", [20.0, 20.0, 60.0][rep]))
            b.append(iteration("BM_Estimate/chain10k_train_analytical", 5.0))
            b.append(iteration("BM_Estimate/chain10k_train_symbolic", 40.0))
        text = printed(bench_ratios.table, {"benchmarks": b, "context": {}})
        self.assertIn("| chain10k (10,000 nodes) | 10.0 | 20.0 (2.00) | 5.0 (0.50) | 40.0 (4.00) |",
                      text)
        self.assertIn("| 2.50 | 6.00 |", text)
        self.assertNotIn("as a new process", text)  # no process rows in this run
        self.assertNotIn("same rounds", text)  # nor paired ones

    def test_the_ratios_timed_in_the_same_rounds(self):
        b = [iteration("BM_ChainPaired/chain100k_analytical", 300.0, rounds=7, parse_ms=80.0,
                       load_ms=176.0, load_x=2.21, estimate_x=0.55, load_estimate_x=2.79),
             iteration("BM_ChainPaired/chain100k_symbolic", 500.0, rounds=3, parse_ms=82.0,
                       load_ms=180.0, load_x=2.2, estimate_x=3.4, load_estimate_x=5.61),
             # a size with one backend only: the other's cells are left blank
             iteration("BM_ChainPaired/chain1m_symbolic", 5000.0, rounds=2, parse_ms=800.0,
                       load_ms=2000.0, load_x=2.5, estimate_x=4.0, load_estimate_x=6.5)]
        text = printed(bench_ratios.table, {"benchmarks": b, "context": {}})
        self.assertIn("| chain100k | 7 / 3 | 80.0 | 176.0 | 2.21 | 0.55 | 3.40 | 2.79 | 5.61 |",
                      text)
        self.assertIn("| chain1m | – / 2 | 800.0 | 2000.0 | 2.50 | – | 4.00 | – | 6.50 |", text)
        self.assertNotIn("| chain10k |", text)

    def test_the_processes_against_the_parse_as_a_process(self):
        b = [median("BM_ParseProcessChain/cold_chain100k_parse/real_time", 250.0),
             median("BM_CliProcessChain/cold_chain100k_analytical/real_time", 625.0),
             median("BM_CliProcessChain/cold_chain100k_symbolic/real_time", 1500.0),
             # a size without its parse process is left out
             median("BM_CliProcessChain/cold_chain1m_analytical/real_time", 6000.0)]
        text = printed(bench_ratios.table, {"benchmarks": b, "context": {}})
        self.assertIn("| chain100k | 250.0 | 625.0 (2.50) | 1,500.0 (6.00) |", text)
        self.assertNotIn("| chain1m |", text)


if __name__ == "__main__":
    unittest.main()

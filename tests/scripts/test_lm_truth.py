"""scripts/gpu_device_truth.py --suite lm (its orchestrator in stub mode, no GPU) and
scripts/score_lm_truth.py's reading of the committed H100 language-model rows."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import score_lm_truth  # noqa: E402

ROWS = ROOT / "datasets/h100-lm-torch211/device-truth.jsonl"
MEMEST = os.environ.get("MEMEST_CLI", str(ROOT / "build/tools/memest"))


class OrchestratorTest(unittest.TestCase):
    def test_every_config_gets_its_training_and_prefill_shapes(self):
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, MEMEST_DEVICE_TRUTH_FAKE="1")
            subprocess.run([sys.executable, str(ROOT / "scripts/gpu_device_truth.py"), "--suite", "lm",
                            "--out", out, "--deadline", "60", "--hard-stop", "90",
                            "--lm-configs", "gpt2.json,qwen2.5-0.5b.json", "--lm-train-shapes", "1x512,2x2048"],
                           check=True, env=env, capture_output=True)
            rows = [json.loads(l) for l in (pathlib.Path(out) / "results.jsonl").read_text().splitlines()]
        train = {(r["model"], r["seq"]) for r in rows if r["kind"] == "lm_train"}
        prefill = {(r["model"], r["seq"]) for r in rows if r["kind"] == "lm_prefill"}
        # gpt2 has 1,024 positions: no 2,048 training shape and no prefill beyond 1,024.
        self.assertEqual(train, {("gpt2.json", 512), ("qwen2.5-0.5b.json", 512), ("qwen2.5-0.5b.json", 2048)})
        self.assertEqual({s for m, s in prefill if m == "gpt2.json"}, {1024})
        self.assertIn(("qwen2.5-0.5b.json", 32768), prefill)


class TaskTest(unittest.TestCase):
    def test_checkpointed_variants_get_a_process_of_their_own(self):
        import gpu_device_truth
        tasks = gpu_device_truth.lm_tasks(0, 1 << 30, 80 << 30, ["qwen3-0.6b.json"], [(1, 512)],
                                          prefill=False,
                                          train_variants=["bf16", "fp32+ckpt", "amp-bf16+top2"])
        self.assertEqual([t["variants"] for t in tasks], [["bf16", "amp-bf16+top2"], ["fp32+ckpt"]])

    def test_a_mistyped_variant_is_refused(self):
        import gpu_device_truth
        with self.assertRaises(ValueError):
            gpu_device_truth.lm_variant("fp32+top")


class RowSelectionTest(unittest.TestCase):
    def test_the_committed_rows_left_out_and_why(self):
        kept, left_out = score_lm_truth.rows_to_score(ROWS)
        self.assertEqual(len(kept), 435)
        self.assertEqual(left_out["began with a previous row's tensors alive"], 1)
        self.assertEqual(left_out["reserved past 90 % of the cap"], 40)
        self.assertEqual(left_out["status over_cap"], 68)
        self.assertEqual(left_out["ran after a gradient-checkpointed row in its process"], 31)
        self.assertEqual(left_out["its peak includes the cast of the fp32 weights to bf16"], 22)
        # calls 4-7 measured 15 jobs twice (under two caps): each is scored once, from its first row
        self.assertEqual(left_out["a repeat of a job already scored"], 17)
        jobs = [score_lm_truth.job_key(r) for r, _ in kept]
        self.assertEqual(len(jobs), len(set(jobs)))
        for row, truth in kept:
            self.assertEqual(row["status"], "ok")
            self.assertLessEqual(truth["reserved"], 0.9 * row["cap_bytes"])
            self.assertGreater(truth["device"], truth["reserved"])

    def test_a_row_after_checkpointing_is_scored_from_a_process_without_it(self):
        # call 15 measured this job before and after a checkpointed row: 4,426 and 11,494 MiB
        kept, _ = score_lm_truth.rows_to_score(ROWS)
        truth = {score_lm_truth.label(r): (r["call"], t) for r, t in kept}
        call, t = truth["gpt2-medium sdpa amp-bf16+top2 b4 s1024"]
        self.assertEqual(call, 14)
        self.assertEqual(t["allocated"] >> 20, 4426)

    def test_from_call_16_checkpointed_variants_ran_in_a_process_of_their_own(self):
        # call 19 ran gemma-2b's bf16+ckpt rows beside (not before) its bf16+top2 rows
        kept, _ = score_lm_truth.rows_to_score(ROWS)
        truth = {score_lm_truth.label(r): (r["call"], t) for r, t in kept}
        self.assertEqual(truth["gemma-2b sdpa bf16+top2 b1 s1024"][0], 19)

    def test_a_bf16_row_is_scored_without_the_cast_in_its_peak(self):
        kept, _ = score_lm_truth.rows_to_score(ROWS)
        truth = {score_lm_truth.label(r): (r["call"], t) for r, t in kept}
        call, t = truth["tinyllama-1.1b-chat-v1.0 sdpa bf16+top2 b1 s1024"]
        self.assertEqual(call, 16)  # calls 13 and 14 read 4,386 MiB: the cast, not the step
        self.assertLess(t["allocated"] >> 20, 4000)

    def test_the_contaminated_row_is_the_one_after_an_out_of_memory_row(self):
        kept, _ = score_lm_truth.rows_to_score(ROWS)
        labels = {score_lm_truth.label(r) for r, _ in kept}
        self.assertNotIn("qwen3-0.6b eager amp-bf16 b1 s512", labels)
        self.assertIn("qwen3-0.6b sdpa amp-bf16 b1 s512", labels)


@unittest.skipUnless(os.path.exists(MEMEST), "memest CLI not built")
class GroupedAttentionTest(unittest.TestCase):
    """The measured fact memest encodes: in fp32, a grouped decoder's sdpa run keeps what its eager
    run keeps (PyTorch 2.11 gives enable_gqa calls no memory-efficient kernel), so memest's auto
    and eager estimates of those jobs are the same; an ungrouped decoder's are not."""

    def peak(self, config, attention):
        out = subprocess.run([MEMEST, "--hf-config", str(ROOT / "tests/data/hf" / config), "--batch", "4",
                              "--dim", "seq=512", "--backend", "symbolic", "--attention", attention, "--json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["results"][0]["peak"]["allocated"]

    def test_grouped_fp32_sdpa_costs_as_eager(self):
        for config in ("qwen2.5-0.5b.json", "tinyllama-1.1b-chat-v1.0.json"):
            self.assertEqual(self.peak(config, "auto"), self.peak(config, "eager"), config)
        self.assertLess(self.peak("gpt2.json", "auto"), self.peak("gpt2.json", "eager"))


if __name__ == "__main__":
    unittest.main()

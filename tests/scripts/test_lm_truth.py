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


class RowSelectionTest(unittest.TestCase):
    def test_the_committed_rows_left_out_and_why(self):
        kept, left_out = score_lm_truth.rows_to_score(ROWS)
        self.assertEqual(len(kept), 279)
        self.assertEqual(left_out["began with a previous row's tensors alive"], 1)
        self.assertEqual(left_out["reserved past 90 % of the cap"], 28)
        self.assertEqual(left_out["status over_cap"], 45)
        # calls 4-7 measured 15 jobs twice (under two caps): each is scored once, from its first row
        self.assertEqual(left_out["a repeat of a job already scored"], 15)
        jobs = [score_lm_truth.job_key(r) for r, _ in kept]
        self.assertEqual(len(jobs), len(set(jobs)))
        for row, truth in kept:
            self.assertEqual(row["status"], "ok")
            self.assertLessEqual(truth["reserved"], 0.9 * row["cap_bytes"])
            self.assertGreater(truth["device"], truth["reserved"])

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

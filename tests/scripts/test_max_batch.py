"""scripts/gpu_max_batch.py's search (in its stub mode, no GPU) and scripts/score_max_batch.py's
reading of the committed H100 trials."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import score_max_batch  # noqa: E402

MIB = 1 << 20
ROWS = ROOT / "datasets/h100-torch211/max-batch.jsonl"


class SearchTest(unittest.TestCase):
    def search(self, capacity_bytes, start, cap_bytes=0):
        with tempfile.TemporaryDirectory() as out:
            starts = pathlib.Path(out) / "starts.json"
            key = "capped" if cap_bytes else "whole"
            starts.write_text(json.dumps({key: {"resnet50_train": start}, "cap_bytes": cap_bytes}))
            env = dict(os.environ, MEMEST_MAX_BATCH_FAKE=str(capacity_bytes))
            subprocess.run([sys.executable, str(ROOT / "scripts/gpu_max_batch.py"), "--out", out,
                            "--start", str(starts)], check=True, env=env, capture_output=True)
            answers = [json.loads(l) for l in (pathlib.Path(out) / "answers.jsonl").read_text().splitlines()]
            trials = [json.loads(l) for l in (pathlib.Path(out) / "trials.jsonl").read_text().splitlines()]
        self.assertEqual(len(answers), 1)
        return answers[0], trials

    def test_brackets_the_capacity_from_below_and_above(self):
        for start in (10, 953, 5000):
            a, _ = self.search(953 * MIB, start)
            self.assertTrue(a["complete"])
            self.assertLessEqual(a["largest_fit"], 953)
            self.assertGreater(a["smallest_oom"], 953)
            self.assertLessEqual(a["smallest_oom"] - a["largest_fit"], max(1, a["largest_fit"] // 256))

    def test_a_start_near_the_answer_needs_few_trials(self):
        a, trials = self.search(1000 * MIB, 990)
        self.assertEqual(a["trials"], len(trials))
        self.assertLessEqual(len(trials), 6)

    def test_a_capped_search_is_limited_by_the_cap(self):
        a, _ = self.search(10**12, 100, cap_bytes=300 * MIB)
        self.assertLessEqual(a["largest_fit"], 300)
        self.assertGreater(a["smallest_oom"], 300)


class ScoreTest(unittest.TestCase):
    def test_brackets_are_read_off_the_trials(self):
        b = score_max_batch.brackets([json.loads(l) for l in ROWS.read_text().splitlines()])
        self.assertEqual(len(b), 10)
        self.assertEqual(b[("resnet50_train", 0)], (958, 960, []))
        # resnet18_eval's failure at 10,560 is a CUDA out-of-memory inside cuDNN (status error).
        self.assertEqual(b[("resnet18_eval", 0)], (10400, 10560, []))
        self.assertEqual(b[("mlp_small_train", 0)][1], None)  # the search did not close

    def test_verdicts(self):
        self.assertEqual(score_max_batch.verdict(958, 958, 960)[0], "safe")
        self.assertEqual(score_max_batch.verdict(960, 958, 960)[0], "over")
        self.assertEqual(score_max_batch.verdict(959, 958, 960)[0], "unresolved")
        self.assertEqual(score_max_batch.verdict(7, None, 960)[0], "unresolved")

    @unittest.skipUnless(os.environ.get("MEMEST_CLI"), "MEMEST_CLI (the memest binary) not set")
    def test_scores_every_search_with_the_cli(self):
        out = subprocess.run([sys.executable, str(ROOT / "scripts/score_max_batch.py"),
                              "--memest", os.environ["MEMEST_CLI"]],
                             check=True, capture_output=True, text=True).stdout
        self.assertEqual(sum(" safe" in l or " over" in l or "unresolved" in l
                             for l in out.splitlines() if "whole GPU" in l or "cap" in l), 10)


if __name__ == "__main__":
    unittest.main()

"""scripts/gpu_device_truth.py --suite rnn: its orchestrator in stub mode (no GPU), its grid, and
the recurrent calls it measures, run on the CPU (the weights flattened and as separate tensors)."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_device_truth  # noqa: E402


class RnnSuiteTest(unittest.TestCase):
    def test_every_mode_and_dtype_is_a_task(self):
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, MEMEST_DEVICE_TRUTH_FAKE="1")
            subprocess.run([sys.executable, str(ROOT / "scripts/gpu_device_truth.py"), "--suite",
                            "rnn", "--out", out, "--deadline", "60", "--hard-stop", "90"],
                           check=True, env=env, capture_output=True)
            rows = [json.loads(l) for l in (pathlib.Path(out) / "results.jsonl").read_text().splitlines()]
        self.assertEqual(sum(r["kind"] == "rnn" for r in rows), 6)

    def test_the_grid_has_odd_hidden_sizes_and_both_directions(self):
        specs = gpu_device_truth.rnn_specs("gru", "bfloat16")
        self.assertEqual(len(specs), 48)
        self.assertIn(61, {s["hidden"] for s in specs})
        self.assertEqual({s["dirs"] for s in specs}, {1, 2})

    def test_a_grid_replaces_only_the_axes_it_names(self):
        grid = gpu_device_truth.parse_rnn_grid("hidden=113,150;input=1024")
        specs = gpu_device_truth.rnn_specs("lstm", "float32", grid)
        self.assertEqual({s["hidden"] for s in specs}, {113, 150})
        self.assertEqual({s["input"] for s in specs}, {1024})
        self.assertEqual(len(specs), 2 * 1 * 2 * 2 * 2)
        with self.assertRaises(ValueError):
            gpu_device_truth.parse_rnn_grid("width=3")
        with self.assertRaises(ValueError):
            gpu_device_truth.parse_rnn_grid("batch=0")

    def test_both_weight_layouts_run_forward_and_backward(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        for mode in ("lstm", "gru"):
            for flat in (True, False):
                spec = {"mode": mode, "dtype": "float32", "hidden": 5, "input": 3, "seq": 4,
                        "batch": 2, "dirs": 2}
                run, inputs = gpu_device_truth.rnn_call(torch, spec, flat, "cpu")
                y, states = run()
                self.assertEqual(tuple(y.shape), (2, 4, 10))
                states = list(states) if isinstance(states, tuple) else [states]
                self.assertEqual(len(states), 2 if mode == "lstm" else 1)
                grads = torch.autograd.grad(y, inputs, torch.ones_like(y))
                self.assertEqual(len(grads), 1 + 4 * 2)  # x, then w_ih, w_hh, b_ih, b_hh per direction
                self.assertTrue(all(g is not None for g in grads))


if __name__ == "__main__":
    unittest.main()

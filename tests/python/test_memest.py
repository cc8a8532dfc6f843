"""The memest Python package against the CLI and the C++ library's contract.

Run by ctest (PythonTest.*) with PYTHONPATH=<build>/python and MEMEST_CLI / MEMEST_SOURCE_DIR set.
"""
import json
import os
import subprocess
import threading
import unittest

import memest

SOURCE = os.environ.get("MEMEST_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.environ.get("MEMEST_CLI", "memest")
RESNET = os.path.join(SOURCE, "datasets", "models", "resnet18_train.onnx")
GPT2 = os.path.join(SOURCE, "datasets", "models", "gpt2_tiny_train.onnx")


def cli_json(*args):
    out = subprocess.run([CLI, *args, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout)


class EstimateTest(unittest.TestCase):
    def test_estimate_equals_the_cli(self):
        model = memest.load(RESNET)
        for backend in ("analytical", "symbolic"):
            e = memest.estimate(model, backend, batch=32, gpu="a100-40gb", precision="amp-bf16")
            doc = cli_json(RESNET, "--batch", "32", "--gpu", "a100-40gb", "--precision",
                           "amp-bf16", "--backend", backend)
            r = doc["results"][0]
            self.assertEqual(e.peak_device, r["peak"]["device"], backend)
            self.assertEqual(e.breakdown.weights, r["breakdown"]["weights"])
            self.assertEqual(e.fit.fits, r["fit"]["fits"])
            self.assertEqual(e.fit.headroom, r["fit"]["headroom"])
            self.assertEqual(sum(e.to_dict()["breakdown"].values()), e.peak_device)
            self.assertEqual(e.phases, r.get("phases", []), backend)
            # The analytical backend reports the step's two phases; the symbolic one none.
            expected = ["backward", "optimizer_step"] if backend == "analytical" else []
            self.assertEqual([p["phase"] for p in e.phases], expected, backend)

    def test_bytes_and_paths_load_the_same_model(self):
        with open(GPT2, "rb") as f:
            from_bytes = memest.load(f.read(), "gpt2")
        from_path = memest.load(GPT2)
        self.assertEqual(from_bytes.parameters, from_path.parameters)
        a = memest.estimate(from_bytes, batch=4)
        b = memest.estimate(from_path, batch=4)
        self.assertEqual(a, b)

    def test_max_batch_equals_the_cli(self):
        model = memest.load(RESNET)
        batch, at = memest.max_batch(model, gpu="l4-24gb")
        doc = cli_json(RESNET, "--max-batch", "--gpu", "l4-24gb")
        self.assertEqual(batch, doc["results"][0]["max_batch"]["batch"])
        self.assertTrue(at.fit.fits)

    def test_many_gpus_give_a_rank_table(self):
        model = memest.load(GPT2)
        e = memest.estimate(model, batch=8, precision="amp-bf16", micro_batches=2,
                            parallel={"world_size": 8, "pp": 2, "sharding": "zero1"})
        self.assertEqual(len(e.ranks), 2)
        self.assertEqual(e.ranks[1]["first_rank"], 4)
        self.assertGreater(e.breakdown.nccl_buffers, 0)

    def test_a_capacity_replaces_the_gpus(self):
        model = memest.load(RESNET)
        e = memest.estimate(model, batch=64, gpu="a100-40gb", capacity=2**30)
        self.assertEqual(e.fit.capacity, 2**30)
        self.assertFalse(e.fit.fits)

    def test_threads_estimate_at_once(self):
        model = memest.load(RESNET)
        results = []
        def run():
            results.append(memest.estimate(model, "symbolic", batch=16).peak_device)
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(set(results)), 1)


class PackTest(unittest.TestCase):
    def test_pack_equals_the_cli(self):
        a, b = memest.load(RESNET), memest.load(GPT2)
        doc = memest.pack([(a, {"batch": 64}), (b, {"batch": 8})], "a100-40gb")
        cli = json.loads(subprocess.run(
            [CLI, "pack", "--gpu", "a100-40gb", RESNET + ":batch=64", GPT2 + ":batch=8", "-o",
             "json"], capture_output=True, text=True).stdout)
        self.assertEqual(doc["total"], cli["total"])
        self.assertTrue(doc["fits"])
        placed = memest.pack([(a, {"batch": 64})] * 3, "l4-24gb", gpus=2)
        self.assertEqual(sum(len(g["jobs"]) for g in placed["gpus"]) + len(placed["unplaced"]), 3)


class AdmissionExampleTest(unittest.TestCase):
    """python/examples/admit.py, the admission check docs/embedding.md shows."""

    def test_admits_what_fits_and_offers_a_batch_that_does(self):
        import importlib.util
        path = os.path.join(SOURCE, "python", "examples", "admit.py")
        spec = importlib.util.spec_from_file_location("admit", path)
        admit = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(admit)
        self.assertEqual(admit.admit(RESNET, "a100-40gb", 32), (True, None))
        ok, largest = admit.admit(RESNET, "l4-24gb", 4096)
        self.assertFalse(ok)
        self.assertGreater(largest, 0)
        self.assertLess(largest, 4096)
        self.assertEqual(admit.main(["admit.py", "/nonexistent.onnx", "l4-24gb", "8"]), 2)


class ErrorTest(unittest.TestCase):
    def test_bad_input_raises_memest_error_with_its_code(self):
        model = memest.load(RESNET)
        cases = [
            (lambda: memest.load(b"not an onnx model"), "invalid_model"),
            (lambda: memest.load("/nonexistent.onnx"), "not_found"),
            (lambda: memest.estimate(model, batchsize=4), "invalid_argument"),
            (lambda: memest.estimate(model, batch="4"), "invalid_argument"),
            (lambda: memest.estimate(model, batch=4, gpu="no-such-gpu"), "not_found"),
            (lambda: memest.estimate(model, "no-such-backend", batch=4), "not_found"),
            (lambda: memest.estimate(model), "unbound_dim"),
            (lambda: memest.estimate(model, batch=4, parallel={"world_size": 8, "tp": 3}),
             "invalid_argument"),
        ]
        for call, code in cases:
            with self.assertRaises(memest.Error) as ctx:
                call()
            self.assertTrue(str(ctx.exception).startswith(code + ":"), str(ctx.exception))


class FromTorchTest(unittest.TestCase):
    def test_a_live_module_is_exported_in_memory_and_estimated(self):
        try:
            import torch
        except ImportError:
            self.skipTest("python3-torch is not installed (apt-get install python3-torch)")
        net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                  torch.nn.Linear(256, 10))
        e = memest.from_torch(net, (torch.randn(32, 64),), gpu="a100-40gb")
        self.assertEqual(e.breakdown.gradients, (64 * 256 + 256 + 256 * 10 + 10) * 4)
        self.assertTrue(e.fit.fits)


if __name__ == "__main__":
    unittest.main()

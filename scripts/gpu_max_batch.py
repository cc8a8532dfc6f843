#!/usr/bin/env python3
"""The largest batch that really runs on the lent GPU, found by trials, to score `memest --max-batch`.

Policy: a batch fits when a fresh process (new CUDA context, empty caching allocator) runs the
job's 3 iterations without torch.cuda.OutOfMemoryError; nothing is computed, every trial is a
row read off the GPU. The search starts at a batch given on the command line (memest's answer,
so that few trials are needed), steps away from it by growing factors until it holds a fitting
and a failing batch, then bisects until the two are at most max(1, lo // 256) apart. Bisection
assumes fits are monotone in the batch; every trial is kept, so where they are not the rows show it.

Jobs are the bundled models of datasets/models, built from the PyTorch modules they were exported
from (datasets/bundled_modules.py: torchvision ResNets, TinyGPT2, the MLP): training is Adam,
fp32, cross-entropy, `cudnn.benchmark` off, 3 iterations, as in scripts/gpu_device_truth.py;
the eval job runs 3 forward passes under torch.inference_mode().

Usage (on the device machine, from the repository root):
  python3 scripts/gpu_max_batch.py --out "$OUT" --start starts.json --deadline 420
starts.json: {"whole": {"resnet50_train": 966, ...}, "capped": {...}, "cap_bytes": N}.
Searches on the whole GPU run one at a time; capped searches (set_per_process_memory_fraction)
run --slots at a time, their caps together well under the card. Rows go to $OUT/trials.jsonl,
answers to $OUT/answers.jsonl. MEMEST_MAX_BATCH_FAKE=BYTES runs a stub (fits when
batch * 1 MiB <= BYTES) to test the search without a GPU.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20

JOBS = {
    "resnet50_train": {"factory": "resnet50", "train": True},
    "resnet18_train": {"factory": "resnet18", "train": True},
    "resnet18_eval": {"factory": "resnet18", "train": False},
    "gpt2_tiny_train": {"factory": "gpt2_tiny", "train": True},
    "mlp_small_train": {"factory": "mlp_small", "train": True},
}


# ---------------------------------------------------------------------------------------------
# Worker: one trial in a fresh process
# ---------------------------------------------------------------------------------------------
def make_model(factory):
    import torch
    torch.manual_seed(0)
    if factory in ("resnet50", "resnet18"):
        import torchvision
        return getattr(torchvision.models, factory)(weights=None, num_classes=1000)
    sys.path.insert(0, os.path.join(ROOT, "datasets"))
    import bundled_modules
    return {"gpt2_tiny": bundled_modules.make_gpt2_tiny,
            "mlp_small": bundled_modules.make_mlp_small}[factory]()


def inputs(torch, factory, batch, device):
    """The job's input and cross-entropy targets, shaped as the bundled graph's input."""
    if factory == "gpt2_tiny":
        x = torch.randint(0, 8192, (batch, 128), device=device)
        return x, torch.randint(0, 8192, (batch * 128,), device=device)
    if factory == "mlp_small":
        return torch.randn(batch, 784, device=device), torch.randint(0, 10, (batch,), device=device)
    return (torch.randn(batch, 3, 224, 224, device=device),
            torch.randint(0, 1000, (batch,), device=device))


def nvml_process_used():
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory)
    except Exception:  # noqa: BLE001 -- NVML absent or refusing is recorded as None
        return None
    return None


def trial(job_name, batch, cap_bytes, device):
    import torch
    job = JOBS[job_name]
    cuda = device == "cuda"
    if cuda and cap_bytes:
        torch.cuda.set_per_process_memory_fraction(
            cap_bytes / torch.cuda.get_device_properties(0).total_memory)
    torch.backends.cudnn.benchmark = False
    t0 = time.time()
    model = make_model(job["factory"]).to(device).train(job["train"])
    status, iterations = "ok", 0
    try:
        x, y = inputs(torch, job["factory"], batch, device)
        if job["train"]:
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
            crit = torch.nn.CrossEntropyLoss()
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                out = model(x)
                loss = crit(out.reshape(-1, out.shape[-1]), y)
                del out
                loss.backward()
                opt.step()
                del loss
                iterations += 1
        else:
            with torch.inference_mode():
                for _ in range(3):
                    out = model(x)
                    del out
                    iterations += 1
        if cuda:
            torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        status = "oom"
    row = {"job": job_name, "batch": batch, "cap_bytes": cap_bytes, "status": status,
           "iterations": iterations, "seconds": round(time.time() - t0, 2)}
    if cuda:
        stats = torch.cuda.memory_stats()
        row.update(max_reserved=torch.cuda.max_memory_reserved(),
                   max_allocated=torch.cuda.max_memory_allocated(),
                   alloc_retries=stats.get("num_alloc_retries", 0),
                   ooms=stats.get("num_ooms", 0), nvml_process_used=nvml_process_used())
    print(json.dumps(row), flush=True)


# ---------------------------------------------------------------------------------------------
# Orchestrator: bracket and bisect, each trial in its own process
# ---------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, out, deadline, trial_timeout):
        self.out, self.stop_at, self.trial_timeout = out, time.time() + deadline, trial_timeout
        self.lock = threading.Lock()

    def record(self, name, row):
        with self.lock, open(os.path.join(self.out, name), "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    def fits(self, job, batch, cap_bytes):
        """True / False, or None when the deadline has passed or the trial broke."""
        if time.time() > self.stop_at:
            return None
        fake = os.environ.get("MEMEST_MAX_BATCH_FAKE")
        if fake:
            ok = batch * MIB <= (cap_bytes or int(fake))
            row = {"job": job, "batch": batch, "cap_bytes": cap_bytes, "status": "ok" if ok else "oom"}
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "trial", job, str(batch),
                   str(cap_bytes), "cuda"]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.trial_timeout)
                lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
                row = json.loads(lines[-1]) if lines else {
                    "job": job, "batch": batch, "cap_bytes": cap_bytes, "status": "error",
                    "rc": p.returncode, "stderr": p.stderr[-1500:]}
            except subprocess.TimeoutExpired:
                row = {"job": job, "batch": batch, "cap_bytes": cap_bytes, "status": "timeout"}
        self.record("trials.jsonl", row)
        return {"ok": True, "oom": False}.get(row["status"])

    def search(self, job, start, cap_bytes):
        lo = hi = None
        b, factor, trials = max(1, start), 1.03, 0
        while lo is None or hi is None:
            ok = self.fits(job, b, cap_bytes)
            trials += 1
            if ok is None:
                break
            if ok:
                lo = b
                if hi is None:
                    b = max(b + 1, int(b * factor))
            else:
                hi = b
                if lo is None:
                    b = max(1, int(b / factor)) if b > 1 else None
                    if b is None:
                        break
            factor = factor * factor if factor < 2 else 2.0
        while lo is not None and hi is not None and hi - lo > max(1, lo // 256):
            mid = (lo + hi) // 2
            ok = self.fits(job, mid, cap_bytes)
            trials += 1
            if ok is None:
                break
            lo, hi = (mid, hi) if ok else (lo, mid)
        done = lo is not None and hi is not None and hi - lo <= max(1, lo // 256)
        self.record("answers.jsonl", {"job": job, "cap_bytes": cap_bytes, "start": start,
                                      "largest_fit": lo, "smallest_oom": hi,
                                      "complete": done, "trials": trials})


def environment(out):
    row = {"kind": "env", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import torch
        import torchvision
        props = torch.cuda.get_device_properties(0)
        row.update(gpu=props.name, total_memory=props.total_memory, torch=torch.__version__,
                   torchvision=torchvision.__version__, cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(),
                   alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                   module_loading=os.environ.get("CUDA_MODULE_LOADING"))
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True)
        row["nvidia_smi"] = smi.stdout.strip()
    except Exception as e:  # noqa: BLE001 -- recorded, the searches still say what ran
        row["error"] = repr(e)
    with open(os.path.join(out, "env.jsonl"), "w") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "trial":
        trial(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--start", required=True, help="JSON file of starting batches")
    ap.add_argument("--deadline", type=float, default=420, help="seconds; no trial starts after")
    ap.add_argument("--trial-timeout", type=float, default=150)
    ap.add_argument("--slots", type=int, default=3, help="capped searches at a time")
    ap.add_argument("--whole-first", default="resnet50_train,resnet18_train",
                    help="whole-GPU searches run before the capped ones; the rest run after")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    starts = json.load(open(args.start))
    if not os.environ.get("MEMEST_MAX_BATCH_FAKE"):
        environment(args.out)
    runner = Runner(args.out, args.deadline, args.trial_timeout)
    first = [j for j in args.whole_first.split(",") if j in starts.get("whole", {})]
    for job in first:
        runner.search(job, starts["whole"][job], 0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.slots) as pool:
        for future in [pool.submit(runner.search, job, start, starts["cap_bytes"])
                       for job, start in starts.get("capped", {}).items()]:
            future.result()
    for job, start in starts.get("whole", {}).items():
        if job not in first:
            runner.search(job, start, 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Calibrate a GPU profile's fixed costs on a real GPU (run on the lent device machine).

Measures, with PyTorch's own CUDA caching allocator and cudaMemGetInfo:
  * total memory, driver/CUDA/torch versions, compute capability;
  * CUDA context size right after initialisation (device used - reserved);
  * the cuBLAS workspace(s) created by the first GEMM (forward thread) and first backward
    (autograd thread) -- docs/memory-model.md §2.3 asks to verify "2 x 32 MiB on Hopper";
  * context growth after cuBLAS/cuDNN kernels are loaded (device used - reserved after one step);
  * one small MLP training step (Adam, fp32) with allocator peaks.
Prints one JSON object on stdout. Usage: python3 tools/gpu/calibrate_profile.py > calib.json
"""
import json, os, platform, subprocess, sys, time

import torch

def used():
    free, total = torch.cuda.mem_get_info()
    return total - free

def snap(tag, rows):
    torch.cuda.synchronize()
    rows.append({"at": tag, "device_used": used(),
                 "allocated": torch.cuda.memory_allocated(),
                 "reserved": torch.cuda.memory_reserved(),
                 "max_allocated": torch.cuda.max_memory_allocated(),
                 "max_reserved": torch.cuda.max_memory_reserved()})

def main():
    out = {"tool": "tools/gpu/calibrate_profile.py", "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        out["nvidia_smi_before"] = smi.stdout.strip()
    except Exception as e:  # noqa: BLE001
        out["nvidia_smi_before"] = f"unavailable: {e}"
    torch.cuda.init()
    dev = torch.cuda.current_device()
    p = torch.cuda.get_device_properties(dev)
    out.update({"device_name": p.name, "total_memory": p.total_memory,
                "capability": f"{p.major}.{p.minor}", "torch": torch.__version__,
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "python": platform.python_version()})
    rows = []
    torch.empty(0, device="cuda")
    snap("init", rows)
    a = torch.randn(1024, 1024, device="cuda")
    snap("after_randn_4MiB", rows)
    b = a @ a
    snap("after_first_matmul", rows)
    w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    (a @ w).sum().backward()
    snap("after_first_backward", rows)
    del a, b, w
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    x = torch.randn(32, 64, 56, 56, device="cuda")
    conv(x).sum().backward()
    snap("after_conv_fwd_bwd", rows)
    del conv, x
    torch.cuda.empty_cache()
    snap("after_empty_cache", rows)
    # Small MLP step, Adam fp32.
    torch.cuda.reset_peak_memory_stats()
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1000)).cuda()
    opt = torch.optim.Adam(model.parameters())
    data = torch.randn(256, 4096, device="cuda"); target = torch.randint(0, 1000, (256,), device="cuda")
    for it in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward(); opt.step()
        snap(f"mlp_adam_iter{it+1}", rows)
    out["snapshots"] = rows
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
        out["nvidia_smi_used_mib_end"] = smi.stdout.strip()
    except Exception as e:  # noqa: BLE001
        out["nvidia_smi_used_mib_end"] = f"unavailable: {e}"
    out["env"] = {k: os.environ.get(k) for k in ("CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG")}
    json.dump(out, sys.stdout, indent=1)
    print()

if __name__ == "__main__":
    main()

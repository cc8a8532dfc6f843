#!/usr/bin/python3
"""Peak RSS of one process that asks a loaded model many questions (core/bind_cache.h's bound).

    PYTHONPATH=build/python scripts/cache_rss.py MODEL.onnx [BATCHES]

Loads MODEL through the Python package (the same library), then runs analytical estimates at
BATCHES batches (16, 32, ...; default 32) x 8 option sets (4 precisions, fused kernels on and off),
each of which needs its own value facts, so the model's caches fill to their bounds. Prints the
process's VmHWM (peak RSS) after the load and after the estimates.
"""
import sys

import memest


def peak_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) // 1024
    return 0


def main():
    path = sys.argv[1]
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    model = memest.load(path)
    after_load = peak_mib()
    for b in range(1, batches + 1):
        for precision in ("fp32", "amp-bf16", "amp-fp16", "bf16"):
            for fused in (True, False):
                memest.estimate(model, "analytical", batch=16 * b, precision=precision,
                                fused_kernels=fused)
    print(f"{path}: peak RSS {after_load} MiB after the load, {peak_mib()} MiB after "
          f"{batches} batches x 8 option sets")


if __name__ == "__main__":
    main()

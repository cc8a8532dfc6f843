#!/usr/bin/env python3
"""Probes where one cuDNN nn.LSTM / nn.GRU training step faults on a GPU (run on a lent machine).

Each shape trains once in its own process (forward, backward, synchronize); a row says whether it
finished and, if not, the first error line. Written after memest-measure's generated RNN runs at
large batches died with "CUDA error: an illegal memory access" (datasets/measured/README.md); its
output of 2026-12-04 is datasets/h200-torch211/rnn-faults.jsonl (the last line, kind=env, was
added by hand from `python3 -c "import torch; print(torch.__version__,
torch.backends.cudnn.version())"` on the same machine). `gate_elems` is batch x seq x gates x
hidden, to see whether the fault follows 2^31 elements (it does not alone: a GRU faults below it).

Usage: python3 scripts/rnn_fault_probe.py > "$OUT/edge.jsonl"
"""
import subprocess, sys, json
code = r'''
import torch, sys
mode, b, q, i, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
m = cls(i, h, batch_first=True).cuda()
x = torch.randn(b, q, i, device="cuda", requires_grad=True)
y, _ = m(x)
y.sum().backward()
torch.cuda.synchronize()
print("ok")
'''
G = {"lstm": 4, "gru": 3}
for mode, b, q, i, h in [("lstm", 9000, 512, 13, 113), ("lstm", 9400, 512, 13, 113),
                         ("lstm", 16384, 512, 13, 113), ("gru", 12000, 512, 13, 113),
                         ("gru", 12500, 512, 13, 113), ("lstm", 4200, 512, 64, 256),
                         ("lstm", 4100, 512, 64, 256)]:
    r = subprocess.run([sys.executable, "-c", code, mode, str(b), str(q), str(i), str(h)],
                       capture_output=True, text=True, timeout=60)
    err = [l for l in r.stderr.splitlines() if "what()" in l or "Error" in l][:1]
    print(json.dumps({"mode": mode, "batch": b, "seq": q, "input": i, "hidden": h,
                      "gate_elems": b * q * G[mode] * h, "over_2_31": b * q * G[mode] * h > 2**31,
                      "rc": r.returncode, "out": r.stdout.strip(), "err": err}), flush=True)

#!/usr/bin/python3
"""Writes every estimator's numbers for every bundled, real and generated model to a JSON file, so
that a refactor can be checked byte for byte:

    scripts/estimate_snapshot.py before.json        # on the old commit
    scripts/estimate_snapshot.py after.json         # on the new one
    scripts/estimate_snapshot.py --compare before.json after.json

Each configuration is `memest MODEL --batch 4 --mode {train,infer} --backend all --json`, and for
the bundled and real models also training under each of VARIANTS (optimizer implementations,
weight decay, losses, precisions, checkpointing, micro-batches, many GPUs); per backend it keeps
the peaks, the breakdown, the peak phase and node, the interval, the per-category maxima and the
diagnostics (as a sorted list, so their order does not count). Generated models are read from
datasets/generated/ (memest-zoo; scripts/accuracy.sh makes them).
"""
import json
import pathlib
import subprocess
import sys

MEMEST = "build/tools/memest"


def models():
    root = pathlib.Path("datasets")
    return (sorted((root / "models").glob("*.onnx")) + sorted((root / "real").glob("*.onnx")) +
            sorted((root / "generated").rglob("*.onnx")))


# Training options each rule of a training step depends on (bundled and real models only).
VARIANTS = [
    ["--optimizer-impl", "single-tensor"],
    ["--optimizer-impl", "fused"],
    ["--weight-decay", "0.01"],
    ["--optimizer-impl", "single-tensor", "--weight-decay", "0.01"],
    ["--optimizer", "adamw", "--weight-decay", "0.01"],
    ["--optimizer", "sgd"],
    ["--loss", "mse"],
    ["--precision", "amp-bf16"],
    ["--checkpoint", "2"],
    ["--micro-batches", "2"],
    ["--world-size", "4", "--zero", "2"],
    ["--world-size", "4", "--fsdp", "full"],
    ["--world-size", "4", "--pp", "2", "--micro-batches", "4"],
]


def configurations():
    for m in models():
        for mode in ("train", "infer"):
            yield f"{m}:{mode}", [str(m), "--batch", "4", "--mode", mode]
        if m.parent.name in ("models", "real"):
            for v in VARIANTS:
                yield f"{m}:train:{' '.join(v)}", [str(m), "--batch", "4", *v]


def snapshot(path):
    out = {}
    for key, args in configurations():
        # learned and measurement refuse --world-size: the per-rank backends only.
        backends = "analytical,symbolic" if "--world-size" in args else "all"
        p = subprocess.run([MEMEST, *args, "--backend", backends, "--json", "-q"],
                           capture_output=True, text=True)
        if p.returncode not in (0, 1):
            out[key] = ["error", p.returncode, p.stderr.strip()]
            continue
        res = []
        for r in json.loads(p.stdout)["results"]:
            if not r["ok"]:
                res.append([r["backend"], r["error"]])
                continue
            diags = sorted([d["code"], d["message"], d["node"], d["op_type"]]
                           for d in r["diagnostics"])
            res.append([r["backend"], r["peak"], r["breakdown"], r["peak_phase"],
                        r["peak_node"], r["interval"], r.get("largest"), diags])
        out[key] = res
    json.dump(out, open(path, "w"), indent=1, sort_keys=True)
    print(f"{len(out)} configurations -> {path}")


def compare(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    print(f"{len(a)} vs {len(b)} configurations; {len(differ)} differ")
    for k in differ[:20]:
        print("  differs:", k)
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    snapshot(sys.argv[1])

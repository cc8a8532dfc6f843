#!/usr/bin/python3
"""Writes jobs.csv: the H200 training rows of device-truth.jsonl in the CSV `memest calibrate` reads.

    datasets/h200-torch211/make_jobs.py      # next to this file; needs ../timm-a100/unpack.sh run

One job per (model, batch, attention) that memest has a graph for: the timm models of
../timm-a100/models/ (the same names, exported from timm 1.0.9) and the torchvision models of
../real/ and ../models/. Left out, and said so on stderr:
  * models whose parameter count on the GPU (timm 1.0.29) differs from the exported graph's
    (timm 1.0.9): another model, so no graph of it exists here;
  * rows without iterations that did not hit the cap (the worker failed before the first step).
measured_mib is the process's NVML peak (nvidia-smi's per-process column): the largest
`process_used` over the three iterations -- the caching allocator never returns memory within a
run and the memory outside it only grows, so the last reading is the peak.
censored=1: the run hit the 32 GiB per-process cap (torch.cuda.set_per_process_memory_fraction) --
a "does not fit in 32 GiB" label, not a number.
attention: "eager" rows ran with timm's fused attention switched off (the exported graphs' form);
"auto" rows ran timm's default, F.scaled_dot_product_attention (PyTorch picks the kernel).
"""
import csv
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
TORCHVISION_GRAPHS = {
    "resnet18": ("../models/resnet18_train.onnx", "tv-resnet"),
    "resnet50": ("../real/resnet50_train.onnx", "tv-resnet"),
    "vgg16": ("../real/vgg16_train.onnx", "tv-vgg"),
    "mobilenet_v2": ("../real/mobilenet_v2_train.onnx", "tv-mobilenet"),
    "vit_b_16": ("../real/vit_b_16_train.onnx", "tv-vit"),
    "densenet121": ("../real/densenet121_train.onnx", "tv-densenet"),
}
MIB = 1 << 20


def main():
    timm = {r["model"]: r for r in csv.DictReader(open(HERE / "../timm-a100/models.csv"))}
    rows = [json.loads(line) for line in open(HERE / "device-truth.jsonl")]
    out, skipped = [], set()
    for r in rows:
        over_cap = r.get("status") == "over_cap"
        if r.get("kind") != "train" or not (r.get("iterations") or over_cap):
            continue
        if r["source"] == "timm":
            m = timm.get(r["model"])
            if m is None or int(m["param_count"]) != r["params"]:
                skipped.add(f"{r['model']}: {r['params']} parameters on the GPU, "
                            f"{m['param_count'] if m else 'no'} in the graph")
                continue
            graph, family = "../timm-a100/" + m["onnx_file"], m["family"]
        else:
            graph, family = TORCHVISION_GRAPHS[r["model"]]
        readings = [i["process_used"] for i in r["iterations"]] + [r["final"]["process_used"]]
        measured = r["cap_bytes"] if over_cap else max(readings)
        out.append({
            "model": graph, "batch": r["batch"], "measured_mib": round(measured / MIB, 1),
            "family": family, "truth": "device", "censored": "1" if over_cap else "0",
            "attention": "eager" if r["attention"] == "eager" else "auto",
            "optimizer": "adam", "precision": "fp32",
            "reserved_mib": round(r["final"]["peak_reserved"] / MIB, 1),
            "allocated_mib": round(r["final"]["peak_allocated"] / MIB, 1),
            "note": "over the 32 GiB cap" if over_cap else ""})
    out.sort(key=lambda j: (j["family"], j["model"], j["attention"], j["batch"]))
    with open(HERE / "jobs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    for s in sorted(skipped):
        print("left out:", s, file=sys.stderr)
    print(f"jobs.csv: {len(out)} rows, {sum(j['censored'] == '1' for j in out)} over the cap, "
          f"{len({j['model'] for j in out})} models, {len({j['family'] for j in out})} families")


if __name__ == "__main__":
    main()

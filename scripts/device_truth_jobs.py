#!/usr/bin/python3
"""Writes DIR/jobs.csv: the training rows of DIR/device-truth.jsonl (scripts/gpu_device_truth.py's
output on a lent GPU) in the CSV `memest calibrate` reads.

    scripts/device_truth_jobs.py datasets/h200-torch211    # needs datasets/timm-a100/unpack.sh run
    scripts/device_truth_jobs.py datasets/h100-torch211

One job per (model, batch, attention) that memest has a graph for: the timm models of
datasets/timm-a100/models/ (the same names, exported from timm 1.0.9) and the torchvision models
of datasets/real/ and datasets/models/. Graph paths are written relative to DIR, which sits beside
those folders. Left out, and said so on stderr:
  * models whose parameter count on the GPU (timm 1.0.29) differs from the exported graph's
    (timm 1.0.9): another model, so no graph of it exists here;
  * rows without iterations that did not hit the cap (the worker failed before the first step);
  * rows whose allocator reserved more than 90 % of the cap (NEAR_CAP below): not the uncapped
    peak.
measured_mib is the process's NVML peak (nvidia-smi's per-process column): the largest
`process_used` over the three iterations -- the caching allocator never returns memory within a
run and the memory outside it only grows, so the last reading is the peak.
censored=1: the run hit the per-process cap (torch.cuda.set_per_process_memory_fraction; the row's
cap_bytes: 32 GiB on the H200, 24 GiB on the H100) -- a "does not fit in the cap" label, not a
number.
attention: "eager" rows ran with timm's fused attention switched off (the exported graphs' form);
"auto" rows ran timm's default, F.scaled_dot_product_attention (PyTorch picks the kernel).
"""
import argparse
import csv
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TORCHVISION_GRAPHS = {
    "resnet18": ("../models/resnet18_train.onnx", "tv-resnet"),
    "resnet50": ("../real/resnet50_train.onnx", "tv-resnet"),
    "vgg16": ("../real/vgg16_train.onnx", "tv-vgg"),
    "mobilenet_v2": ("../real/mobilenet_v2_train.onnx", "tv-mobilenet"),
    "vit_b_16": ("../real/vit_b_16_train.onnx", "tv-vit"),
    "densenet121": ("../real/densenet121_train.onnx", "tv-densenet"),
}
MIB = 1 << 20
GIB = 1 << 30
# A step whose reserved bytes came this close to the cap may have met a failed cudaMalloc, after
# which the caching allocator frees its cached blocks and retries (c10/cuda/CUDACachingAllocator.cpp,
# release_cached_blocks in the malloc path): the step succeeds, but its readings are no longer the
# uncapped peak (on the H100, eca_nfnet_l3 at batch 32 reserved 24 GiB yet NVML read 5.5 GiB).
# 10 % of the cap is larger than any single allocation of these models.
NEAR_CAP = 0.9


def graph_of(row, timm):
    """(graph path relative to a device-truth folder, family) of the row's model, or (None, why)
    when memest has no graph of it (another model under the same name)."""
    if row["source"] != "timm":
        return TORCHVISION_GRAPHS[row["model"]]
    m = timm.get(row["model"])
    if m is None or int(m["param_count"]) != row["params"]:
        return None, (f"{row['model']}: {row['params']} parameters on the GPU, "
                      f"{m['param_count'] if m else 'no'} in the graph")
    return "../timm-a100/" + m["onnx_file"], m["family"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=pathlib.Path, help="folder holding device-truth.jsonl")
    here = ap.parse_args().dir.resolve()
    timm = {r["model"]: r for r in csv.DictReader(open(ROOT / "datasets/timm-a100/models.csv"))}
    rows = [json.loads(line) for line in open(here / "device-truth.jsonl")]
    out, skipped = [], set()
    for r in rows:
        over_cap = r.get("status") == "over_cap"
        if r.get("kind") != "train" or not (r.get("iterations") or over_cap):
            continue
        graph, family = graph_of(r, timm)
        if graph is None:
            skipped.add(family)
            continue
        if not over_cap and r["final"]["peak_reserved"] > NEAR_CAP * r["cap_bytes"]:
            skipped.add(f"{r['model']} batch {r['batch']} ({r['attention']}): reserved peaked at "
                        f"{r['final']['peak_reserved'] / MIB:.0f} MiB of a {r['cap_bytes'] / MIB:.0f}"
                        " MiB cap")
            continue
        readings = [i["process_used"] for i in r["iterations"]] + [r["final"]["process_used"]]
        measured = r["cap_bytes"] if over_cap else max(readings)
        out.append({
            "model": graph, "batch": r["batch"], "measured_mib": round(measured / MIB, 1),
            "family": family, "truth": "device", "censored": "1" if over_cap else "0",
            "attention": "eager" if r["attention"] == "eager" else "auto",
            "optimizer": "adam", "precision": "fp32",
            "reserved_mib": round(r["final"]["peak_reserved"] / MIB, 1),
            "allocated_mib": round(r["final"]["peak_allocated"] / MIB, 1),
            "note": f"over the {r['cap_bytes'] / GIB:g} GiB cap" if over_cap else ""})
    out.sort(key=lambda j: (j["family"], j["model"], j["attention"], j["batch"]))
    with open(here / "jobs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    for s in sorted(skipped):
        print("left out:", s, file=sys.stderr)
    print(f"jobs.csv: {len(out)} rows, {sum(j['censored'] == '1' for j in out)} over the cap, "
          f"{len({j['model'] for j in out})} models, {len({j['family'] for j in out})} families")


if __name__ == "__main__":
    main()

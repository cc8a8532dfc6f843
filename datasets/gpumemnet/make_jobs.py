#!/usr/bin/python3
"""Turns GPUMemNet's rows (memest-zoo gpumemnet --out ROWS.jsonl --write-models DIR) into the CSV
of measured jobs that `memest calibrate` reads (docs/stacks.md).

    datasets/gpumemnet/make_jobs.py ROWS.jsonl MODELS_DIR OUT.csv

The group of a job (held out together when the calibration reports held-out errors) is the MLP's
architecture pattern from its name ("arch:pyramid") and the data step (step 2 adds activations,
BatchNorm and Dropout), so every held-out group is a kind of network the fit never saw. Rows with
status error (GPUMemNet's step-1 script crashed at the first loss, datasets/gpumemnet/README.md)
are left out.
"""
import csv
import json
import os
import re
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    rows_path, models_dir, out_path = sys.argv[1:]
    out_dir = os.path.dirname(os.path.abspath(out_path))
    jobs = []
    for line in open(rows_path):
        r = json.loads(line)
        if r["status"] != "ok":
            continue
        index = int(r["model"]["path"].split(":")[1])
        arch = re.search(r"arch:([a-z]+)", r["model"]["name"])
        step = "step1" if index < 3000 else "step2"
        model = os.path.relpath(os.path.join(models_dir, f"gpumemnet_{index:04d}.onnx"), out_dir)
        jobs.append({"model": model, "batch": r["config"]["batch"],
                     "measured_mib": f'{r["peaks"]["device"] / 1048576:.1f}',
                     "family": f'{arch.group(1) if arch else "unknown"}-{step}',
                     "truth": "device", "optimizer": r["config"]["optimizer"],
                     "precision": r["config"]["precision"]})
    with open(out_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(jobs[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(jobs)
    print(f"{out_path}: {len(jobs)} jobs")


if __name__ == "__main__":
    main()

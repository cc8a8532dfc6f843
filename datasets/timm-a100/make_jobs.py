#!/usr/bin/python3
"""Writes jobs.csv, the rows of this folder in the CSV `memest calibrate` reads (docs/stacks.md).

    datasets/timm-a100/make_jobs.py        # from rows.csv + models.csv, next to this file

A row is excluded from fitting (censored=1) when the source marks it censored (the GPU was full)
or, as the README says, when its peak is below 0.95 x the peak of the same model at a smaller
batch (a run that crashed early); `note` says which. Those rows stay in the file: they are
"does not fit" labels.

attention=auto: timm calls F.scaled_dot_product_attention where PyTorch has it (timm/layers/
config.py, use_fused_attn(): on unless TIMM_FUSED_ATTN=0; models that ask for the experimental
level stay eager), and the table was measured with PyTorch 2.x (README), which picks the
memory-efficient kernel for fp32 on an A100. The exported graphs hold the eager form.
"""
import csv
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


def main():
    models = {r["model"]: r for r in csv.DictReader(open(HERE / "models.csv"))}
    rows = list(csv.DictReader(open(HERE / "rows.csv")))
    rows.sort(key=lambda r: (r["model"], int(r["batch"])))
    best = {}
    out = []
    for r in rows:
        m = models[r["model"]]
        measured = float(r["measured_mib"])
        note = ""
        if r["censored"] == "1":
            note = "censored: measured >= 39,000 MiB (the GPU was full)"
        elif measured < 0.95 * best.get(r["model"], 0.0):
            note = "suspect: below 0.95 x the peak at a smaller batch (crashed early)"
        else:
            best[r["model"]] = max(best.get(r["model"], 0.0), measured)
        out.append({"model": m["onnx_file"], "batch": r["batch"], "measured_mib": r["measured_mib"],
                    "family": m["family"], "truth": "device", "censored": "1" if note else "0",
                    "attention": "auto",
                    "faketensor_mib": r["faketensor_mib"], "note": note})
    with open(HERE / "jobs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    print(f"jobs.csv: {len(out)} rows, {sum(r['censored'] == '1' for r in out)} excluded from fits")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""memest's estimates against measured training rows at each level: allocated, reserved, device.

    scripts/compare_levels.py DIR [--memest BIN] [--gpu NAME] [--stack NAME|--stack-file F]
                              [--csv OUT]

Reads DIR/jobs.csv (scripts/device_truth_jobs.py), runs memest (default build/tools/memest) once
per job and backend (analytical, symbolic) with the job's knobs on the GPU profile whose display
name is the GPU of DIR/device-truth.jsonl (or --gpu), and prints per level the median and P90
absolute error and the share of under-estimates. "allocated" and "reserved" are
the caching allocator's peaks (torch.cuda.max_memory_allocated / max_memory_reserved): no stack
constant enters them, so they check the graph, the training step and the allocator model alone.
Rows over the per-process cap are skipped.
"""
import argparse
import csv
import json
import pathlib
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIB = 1 << 20
LEVELS = {"allocated": "allocated_mib", "reserved": "reserved_mib", "device": "measured_mib"}


def profile_of(here):
    """The memest GPU profile whose display name is the GPU that measured DIR's rows."""
    with open(here / "device-truth.jsonl") as f:
        gpu = next(json.loads(line)["gpu"] for line in f if '"kind": "env"' in line)
    profiles = json.load(open(ROOT / "base/gpu_profiles.json"))["profiles"]
    names = [p["name"] for p in profiles if p["display_name"] == gpu]
    if len(names) != 1:
        raise SystemExit(f"{gpu}: {len(names)} GPU profiles have that display name; pass --gpu")
    return names[0]


def estimate(memest, here, gpu, job, backend, extra):
    cmd = [str(memest), job["model"], "--batch", job["batch"], "--optimizer", job["optimizer"],
           "--precision", job["precision"], "--attention", job["attention"],
           "--gpu", gpu, "--backend", backend, "--json"] + extra
    out = subprocess.run(cmd, cwd=here, capture_output=True, text=True)
    if out.returncode not in (0, 1):  # 1: does not fit -- still an estimate
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["results"][0]["peak"]


def summary(errors):
    a = sorted(abs(e) for e in errors)
    p90 = a[min(len(a) - 1, int(0.9 * len(a)))]
    under = sum(e < 0 for e in errors) / len(errors)
    return f"{len(a):4d}  {100 * statistics.median(a):6.1f} %  {100 * p90:6.1f} %  {100 * under:5.1f} %"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=pathlib.Path, help="folder holding jobs.csv and device-truth.jsonl")
    ap.add_argument("--memest", default=str(ROOT / "build/tools/memest"))
    ap.add_argument("--gpu", help="memest GPU profile (default: from device-truth.jsonl)")
    ap.add_argument("--stack")
    ap.add_argument("--stack-file")
    ap.add_argument("--csv", help="write every job's estimates here")
    args = ap.parse_args()
    here = args.dir.resolve()
    gpu = args.gpu or profile_of(here)
    extra = []
    if args.stack:
        extra += ["--stack", args.stack]
    if args.stack_file:
        extra += ["--stack-file", str(pathlib.Path(args.stack_file).resolve())]
    jobs = [j for j in csv.DictReader(open(here / "jobs.csv")) if j["censored"] == "0"]
    errors = {}
    rows = []
    for j in jobs:
        for backend in ("analytical", "symbolic"):
            peak = estimate(args.memest, here, gpu, j, backend, extra)
            row = {"model": j["model"], "batch": j["batch"], "attention": j["attention"],
                   "backend": backend}
            for level, column in LEVELS.items():
                measured = float(column and j[column]) * MIB
                e = peak[level] / measured - 1
                errors.setdefault((backend, level), []).append(e)
                row[level] = round(e, 4)
            rows.append(row)
    print(f"{here.name} on {gpu}")
    print("backend     level       rows  median      P90      under")
    for (backend, level), errs in sorted(errors.items()):
        print(f"{backend:11} {level:10} {summary(errs)}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()

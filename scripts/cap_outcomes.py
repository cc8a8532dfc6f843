#!/usr/bin/python3
"""memest's "fits" against training steps that ran, or ran out of memory, under a per-process cap.

    scripts/cap_outcomes.py DIR [--memest BIN] [--stack NAME] [--csv OUT]

DIR holds device-truth.jsonl from scripts/gpu_device_truth.py: every training row ran under
torch.cuda.set_per_process_memory_fraction(cap / total memory), and its status says whether the
three steps finished ("ok") or raised OutOfMemoryError ("over_cap"). Near the cap the caching
allocator frees its cached segments and retries a failed cudaMalloc (c10/cuda/
CUDACachingAllocator.cpp), so these rows are the ones that test memest's allocator model under
memory pressure.

For each row with a graph (the rows scripts/device_truth_jobs.py keeps, near-cap rows included)
the symbolic backend is asked twice at the row's batch, attention and the same cap
(--memory-fraction):
  * "budget": memest as it is: the step simulated within the cap, with the allocator's
    release-and-retry (symbolic/symbolic.cc);
  * "unlimited": the step simulated without a limit, fitting when its reserved peak is within the
    cap (memest before the budget was simulated).
Prints, per rule, the rows it calls right and wrong; a row that ran out but is called "fits" is
the error a scheduler cannot forgive.
"""
import argparse
import csv
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import device_truth_jobs  # noqa: E402
from compare_levels import profile_of  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIB = 1 << 20


def graph_of(here, row, timm):
    """The graph memest has of the row's model (scripts/device_truth_jobs.py), or None."""
    graph, _ = device_truth_jobs.graph_of(row, timm)
    return None if graph is None else (here / graph).resolve()


def total_memory(here):
    with open(here / "device-truth.jsonl") as f:
        env = next(json.loads(line) for line in f if '"kind": "env"' in line)
    return env["total_memory"]


def run(memest, graph, row, gpu, stack, fraction):
    cmd = [str(memest), str(graph), "--batch", str(row["batch"]), "--optimizer", "adam",
           "--precision", "fp32", "--attention",
           "eager" if row["attention"] == "eager" else "auto", "--gpu", gpu,
           "--backend", "symbolic", "--json"]
    if stack:
        cmd += ["--stack", stack]
    if fraction is not None:
        cmd += ["--memory-fraction", repr(fraction)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["results"][0]


def outcomes(here, memest=ROOT / "build/tools/memest", stack="h200-pytorch2.11-lazy"):
    """One dict per training row of HERE/device-truth.jsonl with a graph: both rules' verdicts."""
    gpu = profile_of(here)
    total = total_memory(here)
    timm = {r["model"]: r for r in csv.DictReader(open(ROOT / "datasets/timm-a100/models.csv"))}
    out = []
    for line in open(here / "device-truth.jsonl"):
        r = json.loads(line)
        if r.get("kind") != "train" or r.get("status") not in ("ok", "over_cap"):
            continue
        if r["status"] == "ok" and not r.get("iterations"):
            continue
        graph = graph_of(here, r, timm)
        if graph is None:
            continue
        cap = r["cap_bytes"]
        budget = run(memest, graph, r, gpu, stack, cap / total)
        free = run(memest, graph, r, gpu, stack, None)
        codes = {d["code"] for d in budget["diagnostics"]}
        out.append({
            "model": r["model"], "batch": r["batch"], "attention": r["attention"],
            "ran": r["status"] == "ok",
            "measured_allocated_mib": round(r["final"]["peak_allocated"] / MIB),
            "measured_reserved_mib": round(r["final"]["peak_reserved"] / MIB),
            "cap_mib": round(cap / MIB),
            "budget_fits": budget["fit"]["fits"],
            "budget_note": ("out_of_memory" if "out_of_memory" in codes else
                            "allocator_retries" if "allocator_retries" in codes else ""),
            "unlimited_allocated_mib": round(free["peak"]["allocated"] / MIB),
            "unlimited_reserved_mib": round(free["peak"]["reserved"] / MIB),
            "unlimited_fits": free["peak"]["reserved"] <= cap,
        })
    return out


def cells(out, rule):
    """ran & "fits", ran & "does not fit", ran out & "does not fit", ran out & "fits"."""
    k = rule + "_fits"
    return [sum(o["ran"] and o[k] for o in out), sum(o["ran"] and not o[k] for o in out),
            sum(not o["ran"] and not o[k] for o in out), sum(not o["ran"] and o[k] for o in out)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--memest", default=str(ROOT / "build/tools/memest"))
    ap.add_argument("--stack", default="h200-pytorch2.11-lazy")
    ap.add_argument("--csv", help="write every row's verdicts here")
    args = ap.parse_args()
    here = args.dir.resolve()
    out = outcomes(here, args.memest, args.stack)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0].keys()), lineterminator="\n")
            w.writeheader()
            w.writerows(out)
    ran = sum(o["ran"] for o in out)
    print(f"{here.name}: {len(out)} rows with a graph, {ran} ran, {len(out) - ran} ran out "
          f"(cap {out[0]['cap_mib']} MiB, stack {args.stack})")
    print(f"{'rule':10s} {'ran, fits':>10s} {'ran, no':>8s} {'OOM, no':>8s} {'OOM, fits':>10s}")
    for rule in ("budget", "unlimited"):
        c = cells(out, rule)
        print(f"{rule:10s} {c[0]:10d} {c[1]:8d} {c[2]:8d} {c[3]:10d}")
    for o in out:
        if o["ran"] != o["budget_fits"] or o["ran"] != o["unlimited_fits"]:
            print(f"  {o['model']} batch {o['batch']} ({o['attention']}): "
                  f"{'ran' if o['ran'] else 'OOM'}, measured allocated "
                  f"{o['measured_allocated_mib']} MiB; budget "
                  f"{'fits' if o['budget_fits'] else 'no'} {o['budget_note']}; unlimited allocated "
                  f"{o['unlimited_allocated_mib']}, reserved {o['unlimited_reserved_mib']} MiB")


if __name__ == "__main__":
    main()

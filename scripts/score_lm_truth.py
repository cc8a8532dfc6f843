#!/usr/bin/env python3
"""Score `memest --hf-config` against language-model jobs measured on a GPU.

    scripts/score_lm_truth.py [ROWS.jsonl] [--memest BIN] [--backend analytical,symbolic]
                              [--gpu NAME] [--stack NAME] [--markdown] [--jobs-out FILE.csv]

ROWS defaults to datasets/h100-lm-torch211/device-truth.jsonl, written by
`scripts/gpu_device_truth.py --suite lm` on a lent H100: Hugging Face decoders built from
tests/data/hf/*.json by transformers (random weights), each in its own process.

Policy (fixed before any score was read):
  * The truth of a training row is the largest reading over its 3 iterations of the caching
    allocator's peaks (allocated, reserved) and of NVML's per-process used bytes (device). A
    prefill row has one forward; its allocator peaks and NVML reading after it are the truth.
  * Left out, with the reason counted: rows that did not finish (over the cap: a "does not fit in
    the cap" label, not a number); rows whose reserved peak passed 90 % of the cap (a failed
    cudaMalloc near the cap makes the allocator free its cache and retry, so the readings are no
    longer the uncapped peak; the same rule as scripts/device_truth_jobs.py); and rows that began
    with more than 128 MiB allocated beyond the model's weights (the tensors of a preceding
    out-of-memory row were still alive, so the row's peak is not its own). A row after the first
    of its process begins with the two cuBLAS workspaces of the forward and autograd threads
    (2 x 32 MiB on Hopper, taken from the caching allocator and kept) and up to 1 MiB more: the
    first version of this rule allowed 64 MiB and so left out every such row; the readings are
    64-65 MiB on every row but one, which began 24,002 MiB over. A job measured again by a later
    call (the same model, kind, attention, precision, logits held or not, batch and sequence) is
    scored once, from its first finished row: calls 4-7 repeated some jobs under other caps, and
    their readings agree to the MiB.
  * memest runs the row's job: --batch, --dim seq=, --precision (fp32, amp-bf16; bf16 for
    prefill), Adam with foreach (memest's default, torch.optim's default on CUDA), cross-entropy,
    3 iterations; --attention eager for eager rows and auto for sdpa rows (PyTorch picks the
    kernel); prefill rows with --phase prefill --logits last. No value is fitted to these rows:
    the stack (default h200-pytorch2.11-lazy) was measured on other jobs (docs/stacks.md).
  * Error = (estimate - measured) / measured. "under" counts estimates below the measurement:
    the error a scheduler cannot forgive.
"""
import argparse
import csv
import json
import pathlib
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIB = 1 << 20
NEAR_CAP = 0.90
LEAK_SLACK = 128 * MIB
LEVELS = ("allocated", "reserved", "device")
# From call 16 on, gpu_device_truth.py ran a model's checkpointed variants in a process of their
# own (449676e); before, in the one process of the model's other variants.
OWN_PROCESS_FROM_CALL = 16


def measured(row):
    """{level: bytes} of a finished row."""
    if row["kind"] in ("lm_prefill", "lm_decode"):
        s = row["after_forward"] if row["kind"] == "lm_prefill" else row["steps"][0]
        return {"allocated": s["peak_allocated"], "reserved": s["peak_reserved"],
                "device": s["process_used"]}
    its = row["iterations"]
    return {"allocated": max(i["peak_allocated"] for i in its),
            "reserved": max(i["peak_reserved"] for i in its),
            "device": max(i["process_used"] for i in its)}


def variant(row):
    """A training row's variant (gpu_device_truth.py's lm_variant spec); the rows of calls 1-10
    have no field and are fp32, amp-bf16 or fp32+hold."""
    if row["kind"] != "lm_train":
        return None
    return row.get("variant") or row.get("precision", "") + ("+hold" if row.get("hold_logits") else "")


def job_key(row):
    """What makes two rows the same job (a repeat is scored once)."""
    return (row["kind"], row["model"], row.get("attention"), row.get("precision"), variant(row),
            row.get("batch"), row.get("seq"), row.get("past"))


def cast_in_its_peak(row):
    """A bf16 training row of a model made in fp32 cast the weights down at its start; until
    gpu_device_truth.py reset the peaks after that (`peaks_reset_at_start`), the cast's moment,
    fp32 and bf16 weights at once, was inside the row's peaks."""
    return (row["kind"] == "lm_train" and row.get("precision") == "bf16"
            and not row.get("peaks_reset_at_start")
            and row["start"]["allocated"] < row["after_weights"]["allocated"] - LEAK_SLACK)


def rows_to_score(path):
    """(kept rows with their truth, {reason: count}) from a device-truth file."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kept, left_out = [], {}
    # A worker's rows come in order: (call, kind, model, attention, its own checkpointing process)
    previous_release = {}
    checkpointed = set()  # workers that have run a gradient-checkpointed row
    jobs = set()  # the jobs kept: a later call's repeat of one is left out (counted once)
    for r in rows:
        if r.get("kind") not in ("lm_train", "lm_prefill", "lm_decode"):
            continue
        worker = (r.get("call"), r["kind"], r["model"], r.get("attention"),
                  bool(r.get("checkpointing")) and r.get("call", 0) >= OWN_PROCESS_FROM_CALL)
        start = r.get("start", {}).get("allocated", previous_release.get(worker))
        if "after_release" in r:
            previous_release[worker] = r["after_release"]["allocated"]
        reason = None
        if worker in checkpointed and not r.get("checkpointing"):
            reason = "ran after a gradient-checkpointed row in its process"
        elif r.get("status") != "ok":
            reason = f"status {r.get('status')}"
        else:
            truth = measured(r)
            if truth["reserved"] > NEAR_CAP * r["cap_bytes"]:
                reason = "reserved past 90 % of the cap"
            elif start is not None and start > r["after_weights"]["allocated"] + LEAK_SLACK:
                reason = "began with a previous row's tensors alive"
            elif cast_in_its_peak(r):
                reason = "its peak includes the cast of the fp32 weights to bf16"
        if r.get("checkpointing"):
            checkpointed.add(worker)
        job = job_key(r)
        if not reason and job in jobs:
            reason = "a repeat of a job already scored"
        if reason:
            left_out[reason] = left_out.get(reason, 0) + 1
            continue
        jobs.add(job)
        kept.append((r, truth))
    return kept, left_out


def memest_args(row, args, backend):
    cmd = [args.memest, "--hf-config", str(ROOT / "tests" / "data" / "hf" / row["model"]),
           "--batch", str(row["batch"]), "--dim", f"seq={row['seq']}", "--gpu", args.gpu,
           "--stack", args.stack, "--backend", backend, "--json"]
    if row["kind"] == "lm_prefill":
        return cmd + ["--phase", "prefill", "--logits", "last", "--precision", "bf16",
                      "--attention", "auto"]
    if row["kind"] == "lm_decode":  # seq is 1: one new token over `past` cached ones
        # After the prefill of the past in the same process, the allocator's cache emptied and
        # its peaks reset between them (gpu_device_truth.py task_lm_decode).
        cmd += ["--phase", "decode", "--dim", f"past={row['past']}", "--precision", "bf16",
                "--attention", "auto"]
        as_run = args.decode_as_run and backend == "symbolic"  # the backend that models it
        return cmd + ["--before-decode", "prefill-emptied" if as_run else "nothing"]
    cmd += ["--precision", row["precision"],
            "--attention", "eager" if row["attention"] == "eager" else "auto"]
    if row.get("optimizer_impl", "foreach") != "foreach":
        cmd += ["--optimizer-impl", row["optimizer_impl"]]
    if row.get("micro_batches", 1) > 1:
        cmd += ["--micro-batches", str(row["micro_batches"])]
    if row.get("trainable"):
        cmd += ["--trainable", row["trainable"]]
    if row.get("checkpointing"):
        cmd += ["--checkpoint", "blocks"]
    if not row.get("hold_logits") and backend in ("analytical", "symbolic") and args.outputs_as_run:
        cmd += ["--outputs", "dropped"]  # the loss was computed on the temporary logits
    return cmd


def estimate(row, args, backend):
    cmd = memest_args(row, args, backend)
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        peak = json.loads(p.stdout)["results"][0]["peak"]
        return {level: peak[level] for level in LEVELS}, None
    except (json.JSONDecodeError, KeyError, IndexError):
        return None, f"exit {p.returncode}: {p.stderr.strip()[:200]}"


def variant_group(row):
    """The flags a row exercises beyond calls 1-10's: its variant without the precision (or
    "plain"), for --by-variant."""
    extra = [t for t in (variant(row) or "").split("+") if t not in ("fp32", "amp-bf16", "hold")]
    return "+".join(extra) or "plain"


def label(row):
    name = row["model"].removesuffix(".json").removesuffix(".RECONSTRUCTED")
    if row["kind"] == "lm_prefill":
        return f"{name} prefill bf16 b{row['batch']} s{row['seq']}"
    if row["kind"] == "lm_decode":
        return f"{name} decode bf16 b{row['batch']} past{row['past']}"
    if row.get("variant"):
        return f"{name} {row['attention']} {row['variant']} b{row['batch']} s{row['seq']}"
    hold = " logits held" if row.get("hold_logits") else ""
    return f"{name} {row['attention']} {row['precision']} b{row['batch']} s{row['seq']}{hold}"


def summary(errors):
    if not errors:
        return "no rows"
    a = sorted(abs(e) for e in errors)
    under = [e for e in errors if e < 0]
    return (f"{len(errors)} rows, median |error| {100 * statistics.median(a):.1f} %, "
            f"90th percentile {100 * a[int(0.9 * (len(a) - 1))]:.1f} %, under on {len(under)}, "
            f"worst under {100 * min(errors):.1f} %, worst over {100 * max(errors):.1f} %")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="?",
                    default=str(ROOT / "datasets" / "h100-lm-torch211" / "device-truth.jsonl"))
    ap.add_argument("--memest", default=str(ROOT / "build" / "tools" / "memest"))
    ap.add_argument("--backend", default="analytical,symbolic")
    ap.add_argument("--gpu", default="h100-80gb")
    ap.add_argument("--stack", default="h200-pytorch2.11-lazy")
    ap.add_argument("--markdown", action="store_true", help="every row as a markdown table")
    ap.add_argument("--jobs-out", default="", help="every row and estimate as CSV")
    ap.add_argument("--decode-alone", dest="decode_as_run", action="store_false",
                    help="symbolic: estimate a decode step on a fresh allocator (--before-decode "
                         "nothing) instead of after its prefill, as it ran (prefill-emptied)")
    ap.add_argument("--outputs-as-run", action="store_true",
                    help="analytical, symbolic: tell memest that a row's loop dropped the logits"
                         " after the loss (--outputs dropped) unless the row held them")
    ap.add_argument("--by-variant", action="store_true",
                    help="also a summary per training variant (from call 11: bf16, fused, accum2,"
                         " ckpt, top2; \"plain\" for the others)")
    args = ap.parse_args()

    kept, left_out = rows_to_score(args.rows)
    backends = [b for b in args.backend.split(",") if b]
    work = [(r, truth, b) for r, truth in kept for b in backends]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda w: estimate(w[0], args, w[2]), work))

    errors = {}  # (backend, kind, level) -> [error]
    table, failures = [], []
    for (r, truth, b), (est, failure) in zip(work, results):
        if failure:
            failures.append(f"{label(r)} [{b}]: {failure}")
            continue
        row = {"job": label(r), "backend": b}
        group = r["kind"] + (f"[{variant_group(r)}]" if args.by_variant else "")
        for level in LEVELS:
            e = (est[level] - truth[level]) / truth[level]
            errors.setdefault((b, r["kind"], level), []).append(e)
            if args.by_variant:
                errors.setdefault((b, group, level), []).append(e)
            row[f"measured_{level}_mib"] = round(truth[level] / MIB)
            row[f"estimate_{level}_mib"] = round(est[level] / MIB)
            row[f"error_{level}_pct"] = round(100 * e, 1)
        table.append(row)

    print(f"{len(kept)} rows scored; left out: "
          + (", ".join(f"{n} {why}" for why, n in sorted(left_out.items())) or "none"))
    for key in sorted(errors):
        print(f"{key[0]:10} {key[1]:16} {key[2]:9} {summary(errors[key])}")
    for f in failures:
        print("memest failed:", f, file=sys.stderr)
    if args.markdown:
        print("\n| job | backend | measured MiB (alloc / reserved / device) | error % (alloc / reserved / device) |")
        print("| --- | --- | --- | --- |")
        for t in table:
            m = " / ".join(f"{t[f'measured_{l}_mib']:,}" for l in LEVELS)
            e = " / ".join(f"{t[f'error_{l}_pct']:+.1f}" for l in LEVELS)
            print(f"| {t['job']} | {t['backend']} | {m} | {e} |")
    if args.jobs_out and table:
        with open(args.jobs_out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0].keys()))
            w.writeheader()
            w.writerows(table)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

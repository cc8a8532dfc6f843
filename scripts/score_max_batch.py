#!/usr/bin/env python3
"""Score `memest --max-batch` against the largest batches measured on a GPU.

    scripts/score_max_batch.py [ROWS.jsonl] [--memest BIN] [--gpu NAME] [--stack NAME] [--markdown]
                               [--memest-arg=--safety-margin=1%] ...

ROWS defaults to datasets/h100-torch211/max-batch.jsonl, written by scripts/gpu_max_batch.py: one
row per trial (a fresh process running the job at one batch on the whole GPU or under
set_per_process_memory_fraction). Policy: the measured answer is read off the trials, not off the
search's own summary -- a batch fits when its trial ran all iterations; it fails when the trial
ran out of memory, through the caching allocator (status "oom") or in a kernel ("error" with
"out of memory" in its stderr). The truth is the bracket [largest fit, smallest failure); a trial
that fits above a failure is reported as non-monotone. memest's answer is then:
  safe        at or below the largest measured fit (its shortfall in % of that fit is shown);
  over        at or above the smallest measured failure: a scheduler would place a job that crashes;
  unresolved  strictly inside the bracket, where no trial ran.
memest runs with the trials' job: Adam, fp32, cross-entropy, 3 iterations are the defaults;
"_eval" jobs run with --mode infer; a capped search passes --memory-fraction cap / total memory.
"""
import argparse
import json
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def brackets(rows):
    """{(job, cap_bytes): (largest fit, smallest failure, non-monotone trials)} from trial rows."""
    trials = {}
    for r in rows:
        if r.get("kind") != "trial":
            continue
        failed = r["status"] == "oom" or (r["status"] == "error" and "out of memory" in r.get("stderr", ""))
        if r["status"] == "ok" or failed:
            trials.setdefault((r["job"], r["cap_bytes"]), []).append((r["batch"], r["status"] == "ok"))
    out = {}
    for key, ts in trials.items():
        fits = [b for b, ok in ts if ok]
        fails = [b for b, ok in ts if not ok]
        lo = max(fits) if fits else None
        hi = min(fails) if fails else None
        odd = sorted(b for b in fits if hi is not None and b > hi)
        out[key] = (lo, hi, odd)
    return out


def memest_answer(memest, job, cap_bytes, total, backend, gpu, stack, extra=()):
    cmd = [memest, str(ROOT / "datasets/models" / f"{job}.onnx"), "--max-batch", "--gpu", gpu,
           "--stack", stack, "--backend", backend, "--json", *extra]
    if job.endswith("_eval"):
        cmd += ["--mode", "infer"]
    if cap_bytes:
        cmd += ["--memory-fraction", repr(cap_bytes / total)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["results"][0]["max_batch"]["batch"]


def score(rows, memest, gpu, stack, backends, extra=()):
    """One dict per search: job, cap_bytes, measured bracket, and per backend (answer, verdict,
    error in % of the largest fit or None)."""
    totals = {r["total_memory"] for r in rows if r.get("kind") == "env"}
    if len(totals) != 1:
        raise SystemExit(f"{len(totals)} different total_memory values in the env rows")
    total = totals.pop()
    out = []
    for (job, cap), (lo, hi, odd) in sorted(brackets(rows).items(),
                                            key=lambda kv: (kv[0][1], kv[0][0])):
        row = {"job": job, "cap_bytes": cap, "fit": lo, "fail": hi, "non_monotone": odd}
        for b in backends:
            answer = memest_answer(memest, job, cap, total, b, gpu, stack, extra)
            row[b] = (answer, *verdict(answer, lo, hi))
        out.append(row)
    return out


def verdict(answer, lo, hi):
    if lo is not None and answer <= lo:
        return "safe", 100.0 * (answer - lo) / lo
    if hi is not None and answer >= hi:
        return "over", 100.0 * (answer - (lo if lo else hi)) / (lo if lo else hi)
    return "unresolved", None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="?", default=str(ROOT / "datasets/h100-torch211/max-batch.jsonl"))
    ap.add_argument("--memest", default=str(ROOT / "build/tools/memest"))
    ap.add_argument("--gpu", default="h100-80gb")
    ap.add_argument("--stack", default="h200-pytorch2.11-lazy")
    ap.add_argument("--backends", default="analytical,symbolic")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--memest-arg", action="append", default=[],
                    help="one more argument for every memest call (repeat), e.g. --memest-arg=--safety-margin=1%%")
    args = ap.parse_args()
    backends = args.backends.split(",")
    scored = score([json.loads(line) for line in open(args.rows)], args.memest, args.gpu,
                   args.stack, backends, args.memest_arg)
    head = ["job", "limit", "measured fit", "measured fail"] + backends
    print("| " + " | ".join(head) + " |" if args.markdown else "  ".join(f"{h:>16}" for h in head))
    if args.markdown:
        print("|---|---|" + "---:|" * (len(head) - 2))
    for r in scored:
        cells = [r["job"], limit_text(r["cap_bytes"]), f"{r['fit']:,}" if r["fit"] else "-",
                 f"{r['fail']:,}" if r["fail"] else "not found"]
        if r["non_monotone"]:
            cells[2] += f" (fits above the failure: {r['non_monotone']})"
        cells += [answer_text(r[b]) for b in backends]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(f"{c:>16}" for c in cells))
    for b in backends:
        tally = {v: sum(r[b][1] == v for r in scored) for v in ("safe", "over", "unresolved")}
        print(f"{b}: " + ", ".join(f"{k} {v}" for k, v in tally.items()))


def limit_text(cap_bytes):
    return f"{cap_bytes / (1 << 30):.0f} GiB cap" if cap_bytes else "whole GPU"


def answer_text(scored):
    answer, v, err = scored
    return f"{answer:,} {v}" + (f" {err:+.1f} %" if err is not None else "")


if __name__ == "__main__":
    main()

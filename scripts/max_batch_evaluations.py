#!/usr/bin/env python3
"""Counts the estimates the exact max-batch search spends, per search and in all.

    python3 scripts/max_batch_evaluations.py [--bin build/tools/memest]
                                             [--set main|options|lm|lm-gpus|lm-options|lm-heldout|
                                                    lm-heldout2|lm-infer|lm-parallel|
                                                    lm-heldout3|lm-heldout4|
                                                    lm-heldout5|lm-heldout6|lm-heldout7]
                                             [--backend analytical] [--per-search]
                                             [--extra "--safety-margin 5%"] [--check]

Sets (docs/cli.md `--max-batch`):
  main     the 81 timm graphs of datasets/timm-a100 (unpacked first when they are not yet) and
           the four bundled training graphs, on a100-80gb, h100-80gb and l4-24gb (255
           searches): what the search's rules were chosen on
  options  the same graphs on a100-40gb with amp-bf16, with sgd, and in inference (255)
  lm       the language models of tests/data/hf (not the t5s) on h100-80gb, eager and
           memory-efficient attention, --max-dim seq at batch 4 and --max-batch at seq 512
  lm-gpus  the same models and attentions: a100-40gb --max-dim seq at batch 1 and --max-batch at
           seq 1024, l4-24gb with amp-bf16 --max-dim seq at batch 2
  lm-options  the same models and attentions: a100-80gb with amp-bf16 --max-dim seq at batch 8
           and with sgd --max-batch at seq 2048, h100-80gb with --checkpoint 4 --max-dim seq at
           batch 2
  lm-heldout  the same models and attentions: h200-141gb in bf16 --max-dim seq at batch 16,
           l40s-48gb with fused AdamW --max-batch at seq 256, v100-32gb with amp-fp16 and the
           embeddings frozen --max-dim seq at batch 1: written down before the rules that read
           the backward's phase were measured, and run once they were final
  lm-heldout2  the same models and attentions: a100-40gb with amp-fp16 --max-dim seq at batch 8,
           h100-80gb with the single-tensor optimizer --max-batch at seq 1024, l4-24gb with
           --checkpoint blocks --max-dim seq at batch 1
  lm-infer the same models and attentions in inference: h100-80gb prefill --max-dim seq at batch 8,
           a100-40gb decode --max-dim past at batch 16, l4-24gb forward (--mode infer) --max-batch
           at seq 1024, a100-80gb decode --max-batch at past 2048: written down before the
           inference step kept its terms
  lm-parallel  the same models and attentions on many GPUs: h100-80gb tp 2 x dp 4 with ZeRO-1
           --max-dim seq at batch 4, a100-80gb ZeRO-3 over 4 --max-batch at seq 2048, a100-40gb
           dp 2 x tp 2 x pp 2 with 4 micro-batches --max-batch at seq 1024, h200-141gb FSDP over 8
           --max-dim seq at batch 2: written down before the steps of many GPUs kept their terms
  lm-heldout3  the same models and attentions: rtx4090-24gb --max-dim seq at batch 2, b200-180gb
           in bf16 --max-dim seq at batch 32, a10-24gb with amp-bf16 --max-batch at seq 512,
           gh200-96gb ZeRO-2 over 4 --max-dim seq at batch 8: written down before the terms' shape
           stopped comparing the saved values' ids
  lm-heldout4  the same models and attentions: a100-80gb --max-dim seq at batch 2, l40s-48gb in
           bf16 --max-dim seq at batch 4, h200-141gb ZeRO-2 over 4 --max-dim seq at batch 8, a10-24gb
           --max-batch at seq 1000: written down before the symbolic exact search started from the
           replay's answer where the replay could not vouch for it
  lm-heldout5  the same models and attentions: h100-80gb with amp-bf16 --max-dim seq at batch 2,
           a100-40gb FSDP over 8 --max-dim seq at batch 4, l4-24gb --max-dim seq at batch 1,
           rtx4090-24gb in bf16 --max-dim seq at batch 2: written down before the symbolic replay
           traced a dim at multiples of 128
  lm-heldout6  the same models and attentions, decode steps after their prefill: h100-80gb
           --max-dim past at batch 8, l4-24gb --max-batch at past 1024, a100-80gb in bf16
           --max-dim past at batch 32, h200-141gb --max-batch at past 8192: written down before the
           exact search drew its line through a decode step's device peak
  lm-heldout7  the same models and attentions, decode steps after their prefill: h100-80gb in
           bf16 with the cache emptied --max-dim past at batch 64, l40s-48gb with the cache emptied
           --max-batch at past 512, a100-40gb in bf16 --max-dim past at batch 1, rtx4090-24gb
           --max-batch at past 16384: written down after the decode replay, held out for the
           next change to it
Each search is one `memest ... --json` process (with --extra's arguments appended); its count is
max_batch.evaluations. Run two binaries and compare the totals and the answers (--per-search
prints both for each search). With --backend symbolic a search can replay the step instead
(docs/cli.md `--max-batch`): its traces, replays and the allocator requests those replays ran
(max_batch.replayed_requests, what the probes cost) follow its line, and a line after the
totals sums them.

--check also asks the same binary and backend whether each answer is one: a plain estimate at the
answer fits (none for an answer of 0) and one at its successor does not (the next batch: with
--micro-batches K, K batches on, as the search steps; none for an answer at the search's limit,
2^24 unless the search says otherwise in its JSON). Each answer that is not is printed; the
exit status is 1 when there is one.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def graphs():
    """The bundled training graphs and the timm ones, unpacked first if they are not yet."""
    subprocess.run([os.path.join(ROOT, "datasets/timm-a100/unpack.sh")], check=True)
    return (sorted(glob.glob(os.path.join(ROOT, "datasets/models/*_train.onnx"))) +
            sorted(glob.glob(os.path.join(ROOT, "datasets/timm-a100/models/*.onnx"))))


# The language-model sets: each query's arguments after --hf-config and --attention.
LM_QUERIES = {
    "lm": [["--gpu", "h100-80gb", "--max-dim", "seq", "--batch", "4"],
           ["--gpu", "h100-80gb", "--max-batch", "--dim", "seq=512"]],
    "lm-gpus": [["--gpu", "a100-40gb", "--max-dim", "seq", "--batch", "1"],
                ["--gpu", "a100-40gb", "--max-batch", "--dim", "seq=1024"],
                ["--gpu", "l4-24gb", "--precision", "amp-bf16", "--max-dim", "seq", "--batch", "2"]],
    "lm-options": [["--gpu", "a100-80gb", "--precision", "amp-bf16", "--max-dim", "seq",
                    "--batch", "8"],
                   ["--gpu", "a100-80gb", "--optimizer", "sgd", "--max-batch", "--dim", "seq=2048"],
                   ["--gpu", "h100-80gb", "--checkpoint", "4", "--max-dim", "seq", "--batch", "2"]],
    # Written down before the rules that read the backward's phase were measured on it, and run
    # only once they were final (docs/speed-log.md).
    "lm-heldout": [["--gpu", "h200-141gb", "--precision", "bf16", "--max-dim", "seq",
                    "--batch", "16"],
                   ["--gpu", "l40s-48gb", "--optimizer", "adamw", "--optimizer-impl", "fused",
                    "--max-batch", "--dim", "seq=256"],
                   ["--gpu", "v100-32gb", "--precision", "amp-fp16", "--freeze", "embed",
                    "--max-dim", "seq", "--batch", "1"]],
    # Written down before the candidates read from the analytical backend's terms
    # (api/term_candidates.h) were measured on any set, and run only once they were final.
    "lm-heldout2": [["--gpu", "a100-40gb", "--precision", "amp-fp16", "--max-dim", "seq",
                     "--batch", "8"],
                    ["--gpu", "h100-80gb", "--optimizer-impl", "single-tensor", "--max-batch",
                     "--dim", "seq=1024"],
                    ["--gpu", "l4-24gb", "--checkpoint", "blocks", "--max-dim", "seq",
                     "--batch", "1"]],
    # Inference: written down before the inference step kept its terms (analytical/step_terms.h),
    # and run only once they were final.
    "lm-infer": [["--gpu", "h100-80gb", "--phase", "prefill", "--max-dim", "seq", "--batch", "8"],
                 ["--gpu", "a100-40gb", "--phase", "decode", "--dim", "seq=1", "--max-dim", "past",
                  "--batch", "16"],
                 ["--gpu", "l4-24gb", "--mode", "infer", "--max-batch", "--dim", "seq=1024"],
                 ["--gpu", "a100-80gb", "--phase", "decode", "--dim", "seq=1", "--dim", "past=2048",
                  "--max-batch"]],
    # Many GPUs: written down before the steps of many GPUs kept their terms, and run only once
    # they were final.
    "lm-parallel": [["--gpu", "h100-80gb", "--world-size", "8", "--tp", "2", "--zero", "1",
                     "--max-dim", "seq", "--batch", "4"],
                    ["--gpu", "a100-80gb", "--world-size", "4", "--zero", "3", "--max-batch",
                     "--dim", "seq=2048"],
                    ["--gpu", "a100-40gb", "--world-size", "8", "--dp", "2", "--tp", "2", "--pp",
                     "2", "--micro-batches", "4", "--max-batch", "--dim", "seq=1024"],
                    ["--gpu", "h200-141gb", "--world-size", "8", "--fsdp", "full", "--max-dim",
                     "seq", "--batch", "2"]],
    # Written down before the terms' shape stopped comparing the saved values' ids (only their
    # nodes and segments), and run only once that was final.
    "lm-heldout3": [["--gpu", "rtx4090-24gb", "--max-dim", "seq", "--batch", "2"],
                    ["--gpu", "b200-180gb", "--precision", "bf16", "--max-dim", "seq", "--batch",
                     "32"],
                    ["--gpu", "a10-24gb", "--precision", "amp-bf16", "--max-batch", "--dim",
                     "seq=512"],
                    ["--gpu", "gh200-96gb", "--world-size", "4", "--zero", "2", "--max-dim", "seq",
                     "--batch", "8"]],
    # Written down before the symbolic backend's exact search started from the replay's answer
    # where the replay could not vouch for it, and run only once that was final.
    "lm-heldout4": [["--gpu", "a100-80gb", "--max-dim", "seq", "--batch", "2"],
                    ["--gpu", "l40s-48gb", "--precision", "bf16", "--max-dim", "seq", "--batch",
                     "4"],
                    ["--gpu", "h200-141gb", "--world-size", "4", "--zero", "2", "--max-dim", "seq",
                     "--batch", "8"],
                    ["--gpu", "a10-24gb", "--max-batch", "--dim", "seq=1000"]],
    # Written down before the symbolic replay traced a dim at multiples of 128 (so that sizes
    # padded to 8, 32 or 128 rows are on their curves there), and run only once that was final.
    "lm-heldout5": [["--gpu", "h100-80gb", "--precision", "amp-bf16", "--max-dim", "seq",
                     "--batch", "2"],
                    ["--gpu", "a100-40gb", "--world-size", "8", "--fsdp", "full", "--max-dim",
                     "seq", "--batch", "4"],
                    ["--gpu", "l4-24gb", "--max-dim", "seq", "--batch", "1"],
                    ["--gpu", "rtx4090-24gb", "--precision", "bf16", "--max-dim", "seq", "--batch",
                     "2"]],
    # Decode steps after their prefill: written down before the exact search drew its line through
    # a decode step's device peak, and run only once that was final.
    "lm-heldout6": [["--gpu", "h100-80gb", "--phase", "decode", "--dim", "seq=1", "--max-dim",
                     "past", "--batch", "8"],
                    ["--gpu", "l4-24gb", "--phase", "decode", "--dim", "seq=1", "--dim",
                     "past=1024", "--max-batch"],
                    ["--gpu", "a100-80gb", "--precision", "bf16", "--phase", "decode", "--dim",
                     "seq=1", "--max-dim", "past", "--batch", "32"],
                    ["--gpu", "h200-141gb", "--phase", "decode", "--dim", "seq=1", "--dim",
                     "past=8192", "--max-batch"]],
    # Decode steps after their prefill with the cache emptied between them, and batch-1 decode:
    # written down after the decode replay (2026-11-30), held out for the next change to it.
    "lm-heldout7": [["--gpu", "h100-80gb", "--precision", "bf16", "--phase", "decode", "--dim",
                     "seq=1", "--before-decode", "prefill-emptied", "--max-dim", "past", "--batch",
                     "64"],
                    ["--gpu", "l40s-48gb", "--phase", "decode", "--dim", "seq=1",
                     "--before-decode", "prefill-emptied", "--dim", "past=512", "--max-batch"],
                    ["--gpu", "a100-40gb", "--precision", "bf16", "--phase", "decode", "--dim",
                     "seq=1", "--max-dim", "past", "--batch", "1"],
                    ["--gpu", "rtx4090-24gb", "--phase", "decode", "--dim", "seq=1", "--dim",
                     "past=16384", "--max-batch"]],
}


def searches(which):
    if which == "main":
        for g in graphs():
            for gpu in ("a100-80gb", "h100-80gb", "l4-24gb"):
                yield os.path.basename(g) + " " + gpu, [g, "--max-batch", "--gpu", gpu]
    elif which == "options":
        for g in graphs():
            for opt in (["--precision", "amp-bf16"], ["--optimizer", "sgd"], ["--mode", "infer"]):
                yield (os.path.basename(g) + " " + " ".join(opt),
                       [g, "--max-batch", "--gpu", "a100-40gb"] + opt)
    elif which in LM_QUERIES:
        for f in sorted(glob.glob(os.path.join(ROOT, "tests/data/hf/*.json"))):
            if "t5" in os.path.basename(f):
                continue
            for att in ("eager", "sdpa-mem-efficient"):
                for q in LM_QUERIES[which]:
                    yield (os.path.basename(f) + " " + att + " " + " ".join(q),
                           ["--hf-config", f, "--attention", att] + q)
    else:
        raise SystemExit("unknown set " + which)


def plain_query(args, value):
    """The arguments of a search with its searched value bound to `value` instead."""
    a = list(args)
    if "--max-batch" in a:
        a.remove("--max-batch")
        return a + ["--batch", str(value)]
    i = a.index("--max-dim")
    dim = a[i + 1]
    del a[i:i + 2]
    return a + ["--dim", f"{dim}={value}"]


def successor_step(args):
    """How far the search's next value is: the batch moves by whole --micro-batches."""
    if "--max-batch" not in args:
        return 1
    k = 1  # the last --micro-batches given wins, as in the CLI
    for i, x in enumerate(args):
        if x == "--micro-batches" and i + 1 < len(args):
            k = int(args[i + 1])
        elif x.startswith("--micro-batches="):
            k = int(x.split("=", 1)[1])
    return k


def verdict(binary, args):
    """The plain estimate's verdict: "fits", "does_not_fit", or "error" (also when the CLI
    printed no JSON)."""
    p = subprocess.run([binary] + args + ["--json"], capture_output=True, text=True)
    try:
        return json.loads(p.stdout)["verdict"]
    except (ValueError, KeyError):
        return "error"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/tools/memest"))
    ap.add_argument("--set", default="main", choices=("main", "options") + tuple(LM_QUERIES))
    ap.add_argument("--backend", default="analytical")
    ap.add_argument("--per-search", action="store_true")
    ap.add_argument("--extra", default="", help="more memest arguments for every search")
    ap.add_argument("--check", action="store_true",
                    help="check that each answer fits and its successor does not")
    a = ap.parse_args()
    total = searched = refused = answered = answered_total = checked = invalid = 0
    replayed = [0, 0, 0]  # the symbolic replay's traces, replays and requests, summed
    for name, args in searches(a.set):
        args = args + a.extra.split() + ["--backend", a.backend]
        p = subprocess.run([a.bin] + args + ["--json"], capture_output=True, text=True)
        try:
            doc = json.loads(p.stdout)
            mb = doc["results"][0]["max_batch"]
            limit = doc.get("max_batch", {}).get("limit", 1 << 24)  # the CLI's default
        except (ValueError, KeyError, IndexError):
            refused += 1  # an error the CLI reported (e.g. flash attention in fp32)
            if a.per_search:
                print(name, "refused")
            continue
        searched += 1
        total += mb["evaluations"]
        if mb["batch"] > 0:  # not a search that ends at batch (or value) 1 not fitting
            answered += 1
            answered_total += mb["evaluations"]
        spent = [mb.get(k, 0) for k in ("traces", "replays", "replayed_requests")]
        replayed = [total + n for total, n in zip(replayed, spent)]
        if a.per_search:
            print(name, mb["batch"], mb["evaluations"], *(spent if spent[0] > 0 else []))
        if a.check:
            v = mb["batch"]
            checked += 1
            at = "fits" if v <= 0 else verdict(a.bin, plain_query(args, v))
            # An answer at the search's limit has no successor to check: the search stops there.
            step = successor_step(args)
            beyond = ("does_not_fit" if v + step > limit else
                      verdict(a.bin, plain_query(args, v + step)))
            why = ("an estimate failed" if "error" in (at, beyond) else
                   "it does not fit" if at != "fits" else
                   "its successor fits" if beyond == "fits" else "")
            if why:
                invalid += 1
                print(name, v, "is not the answer:", why)
    print(f"{a.set}: {searched} searches, {total} estimates"
          f" ({total / max(searched, 1):.2f} a search), {refused} refused;"
          f" {answered} with an answer, {answered_total / max(answered, 1):.2f} estimates each")
    if replayed[0]:
        traces, replays, requests = replayed
        print(f"replay: {traces} traces, {replays} replays, {requests} requests replayed")
    if a.check:
        print(f"checked {checked} answers: {invalid} not the answer")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())

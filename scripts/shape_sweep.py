#!/usr/bin/python3
"""Runs memest over every ONNX model under the given paths and counts how each one ended.

    scripts/shape_sweep.py [--memest build/tools/memest] [--batch 4] [--backend symbolic] PATH...

PATH is a model file or a directory searched for *.onnx. Each model is estimated once with
`--batch N --json` (the model's own batch when it has no symbolic batch dim: a fixed-batch model
refuses --batch). The point is issue 14's check: no estimate may rest on tensors whose shapes are
unknown. So every result falls into exactly one class:

  estimate            exit 0 or 1 with a JSON document whose results carry no `unknown_shapes`
                      diagnostic;
  estimate_unknown    an estimate that does carry one -- must be 0 (memest refuses these unless
                      --allow-unknown-shapes, which this script never passes);
  refused_unsupported exit 3, error code unsupported (shapes no rule can size; ops named);
  refused_model       exit 3, another error (invalid model, overflow, unreadable);
  usage               exit 2 (e.g. a symbolic dim other than the batch with no value);
  internal            exit 4 or anything else (a bug);
  timeout             no answer within --timeout seconds (a bug: memest must answer).

Prints one line per class and, with -v, each model that was not a plain estimate with its first
line of stderr. Exit status: 0 when estimate_unknown, internal and timeout are all 0; 1 otherwise.
"""
import argparse
import collections
import json
import pathlib
import subprocess
import sys


def models_under(paths):
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.onnx"))
        else:
            yield p


def run(memest, model, batch, backend, timeout):
    base = [memest, str(model), "--backend", backend, "--json", "-q"]
    for args in (base + ["--batch", str(batch)], base):
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", ""
        err = p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""
        # A fixed-batch model refuses --batch (exit 2 naming the fixed dim): use its own batch.
        if p.returncode == 2 and args is not base and "fixed batch" in err:
            continue
        if p.returncode in (0, 1):
            doc = json.loads(p.stdout)
            unknown = any(d.get("code") == "unknown_shapes"
                          for r in doc["results"] for d in r.get("diagnostics", []))
            return ("estimate_unknown" if unknown else "estimate"), ""
        if p.returncode == 2:
            return "usage", err
        if p.returncode == 3:
            return ("refused_unsupported" if "unsupported" in err or "no rule can size" in err
                    else "refused_model"), err
        return "internal", err
    return "usage", err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memest", default="build/tools/memest")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--backend", default="symbolic")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    counts = collections.Counter()
    for model in models_under(a.paths):
        kind, err = run(a.memest, model, a.batch, a.backend, a.timeout)
        counts[kind] += 1
        if a.verbose and kind != "estimate":
            print(f"{kind}\t{model}\t{err}")
    total = sum(counts.values())
    print(f"models: {total}")
    for kind in ("estimate", "estimate_unknown", "refused_unsupported", "refused_model", "usage",
                 "internal", "timeout"):
        print(f"{kind}: {counts[kind]}")
    bad = counts["estimate_unknown"] + counts["internal"] + counts["timeout"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

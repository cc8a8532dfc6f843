#!/usr/bin/python3
"""Puts the calibrated stacks into base/stacks.json and writes docs/accuracy-device.md.

    scripts/stacks_report.py WORK_DIR     # run by scripts/calibrate_stacks.sh

WORK_DIR holds what `memest calibrate` wrote: <stack>.json (the stack) and <stack>.jobs.csv (every
job's fitted and held-out prediction). base/stacks.json keeps its hand-written stacks first (the
default among them); a calibrated stack replaces the entry of the same name or is appended.
"""
import csv
import json
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
STACKS = ["a100-40gb-timm", "a100-40gb-gpumemnet", "h200-timm"]
TARGETS = {"median": 0.08, "p90": 0.20, "upper_under_5pct": 0.05}
GPUMEMNET_MEDIAN_TARGET = 0.02


def pct(x):
    return f"{100 * x:.1f} %"


def quantile(values, q):
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summary(errors):
    a = [abs(e) for e in errors]
    return {"rows": len(errors), "median": statistics.median(a), "p90": quantile(a, 0.9),
            "under": sum(e < 0 for e in errors) / len(errors),
            "under_5pct": sum(e < -0.05 for e in errors) / len(errors)}


def compare_levels(dataset):
    return subprocess.run(["/usr/bin/python3", str(ROOT / "scripts/compare_levels.py"),
                           str(ROOT / "datasets" / dataset), "--stack", "h200-pytorch2.11-lazy"],
                          capture_output=True, text=True, check=True).stdout.strip()


def replicate_agreement():
    """How closely the H100's NVML peaks repeat the H200's, job by job (uncensored in both)."""
    def jobs(dataset):
        with open(ROOT / "datasets" / dataset / "jobs.csv") as f:
            return {(r["model"], r["batch"], r["attention"]): float(r["measured_mib"])
                    for r in csv.DictReader(f) if r["censored"] == "0"}
    h200, h100 = jobs("h200-torch211"), jobs("h100-torch211")
    both = sorted(set(h200) & set(h100))
    diff = [abs(h100[k] / h200[k] - 1) for k in both]
    return (f"of the {len(both)} jobs in both files, {sum(d == 0 for d in diff)} read the same "
            f"NVIDIA-SMI peak to the MiB, {sum(d <= 0.01 for d in diff)} within 1 %, and the "
            f"largest difference is {pct(max(diff))}")


def merge_stacks(work):
    path = ROOT / "base/stacks.json"
    table = json.loads(path.read_text())
    for name in STACKS:
        stack = json.loads((work / f"{name}.json").read_text())["stack"]
        names = [s["name"] for s in table["stacks"]]
        if name in names:
            table["stacks"][names.index(name)] = stack
        else:
            table["stacks"].append(stack)
    path.write_text(json.dumps(table, indent=2, ensure_ascii=False) + "\n")
    return {s["name"]: s for s in table["stacks"]}


def timm_does_not_fit(work):
    """The censored and crashed timm rows: does memest, with the calibrated stack, say no?"""
    rows = [r for r in csv.DictReader(open(ROOT / "datasets/timm-a100/jobs.csv"))
            if r["censored"] == "1"]
    said_no = 0
    for r in rows:
        p = subprocess.run([str(ROOT / "build/tools/memest"),
                            str(ROOT / "datasets/timm-a100" / r["model"]), "--batch", r["batch"],
                            "--gpu", "a100-40gb", "--stack-file", str(work / "a100-40gb-timm.json"),
                            "--attention", "auto", "--backend", "symbolic", "-q"],
                           capture_output=True, text=True)
        said_no += p.returncode == 1
    return said_no, len(rows)


def cap_section():
    """The capped H100 and H200 rows: ran or ran out, by memest's two rules (cap_outcomes.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import cap_outcomes  # noqa: E402 (a sibling script)
    data = {d: cap_outcomes.outcomes(ROOT / "datasets" / d)
            for d in ("h100-torch211", "h200-torch211")}
    gpu = {"h100-torch211": "H100", "h200-torch211": "H200"}
    lines = ["## Steps at a per-process cap: ran or ran out", "",
             "Every training row of `datasets/h100-torch211/` and `datasets/h200-torch211/` ran "
             "under `torch.cuda.set_per_process_memory_fraction`, and its status says whether the "
             "three steps finished or raised `OutOfMemoryError`. Near the cap the caching "
             "allocator frees its cached segments and retries a failed `cudaMalloc` "
             "(docs/memory-model.md §1.5), so these rows test the allocator model under memory "
             "pressure, which no other measurement here does. `scripts/cap_outcomes.py DIR` asks "
             "the symbolic backend about every row with a graph at the same cap "
             "(`--memory-fraction`), with the measured stack `h200-pytorch2.11-lazy`, by two "
             "rules: **budget**, memest as it is (the step simulated within the cap, releasing "
             "cached segments and retrying before it runs out), and **unlimited**, the step "
             "simulated without a limit and called \"fits\" when its reserved peak is within the "
             "cap (memest before 2026-11-27). Nothing was fitted to these rows.", "",
             "| rows | rule | ran, \"fits\" | ran, \"does not fit\" | ran out, \"does not fit\" "
             "| ran out, \"fits\" |", "|---|---|---:|---:|---:|---:|"]
    for d, out in data.items():
        ran = sum(o["ran"] for o in out)
        for i, rule in enumerate(("budget", "unlimited")):
            head = (f"{gpu[d]}, {len(out)} ({ran} ran, {len(out) - ran} ran out, cap "
                    f"{out[0]['cap_mib'] // 1024} GiB)" if i == 0 else "")
            lines.append(f"| {head} | {rule} | " + " | ".join(str(c) for c in
                                                               cap_outcomes.cells(out, rule)) + " |")
    rows = [dict(o, gpu=gpu[d]) for d, out in data.items() for o in out]
    over = [o for o in rows if o["unlimited_reserved_mib"] > o["cap_mib"]]
    def name(o):
        attention = "" if o["attention"] == "n/a" else f"{o['attention']} attention, "
        return f"{o['model']} at batch {o['batch']} ({attention}{o['gpu']})"
    ran_out = [o for o in over if not o["ran"]]
    ran = [o for o in over if o["ran"]]
    freed = [o for o in ran if o["budget_fits"]]
    lines += ["", f"- The rules differ only on the {len(over)} rows whose unlimited simulation "
              f"reserves more than the cap. {len(ran_out)} of them ran out, and the budget rule "
              f"calls {sum(not o['budget_fits'] for o in ran_out)} of those \"does not fit\"; "
              f"{len(ran)} ran, and it calls {len(freed)} of those \"fits\" (noted "
              "`allocator_retries`): " + "; ".join(name(o) for o in freed) + "."]
    still = [o for o in ran if not o["budget_fits"]]
    if still:
        high = [o["unlimited_allocated_mib"] / o["measured_allocated_mib"] - 1 for o in still]
        above = sum(o["unlimited_allocated_mib"] > o["cap_mib"] for o in still)
        lines.append(f"- The other {len(still)} that ran are still called \"does not fit\". "
                     f"memest's allocated peak is above the measured one in "
                     f"{sum(h > 0 for h in high)} of them (by {pct(min(high))} to "
                     f"{pct(max(high))}), and above the cap itself in {above}: "
                     + "; ".join(f"{name(o)}: {o['unlimited_allocated_mib']:,} MiB allocated, "
                                 f"{o['measured_allocated_mib']:,} MiB measured"
                                 for o in still) + ".")
    wrong = [o for o in rows if not o["ran"] and o["budget_fits"]]
    if wrong:
        lines.append("- Ran out but called \"fits\" by the budget rule: "
                     + "; ".join(f"{name(o)}: {o['unlimited_allocated_mib']:,} MiB allocated "
                                 f"without a limit, {o['measured_allocated_mib']:,} MiB measured "
                                 "when it ran out" for o in wrong)
                     + (" (so by the unlimited rule too: an under-estimate of the step itself)"
                        if all(o["unlimited_fits"] for o in wrong) else "") + ".")
    lines += ["", "Reproduce: `datasets/timm-a100/unpack.sh`, then `scripts/cap_outcomes.py "
              "datasets/h100-torch211` and the same with `datasets/h200-torch211`.", ""]
    return lines


def eval_capped_note(rows, scored):
    """Why the capped ResNet-18 inference is decided by fragmentation, from its trials."""
    r = next(x for x in scored if x["job"] == "resnet18_eval" and x["cap_bytes"])
    t = next(x for x in rows if x.get("kind") == "trial" and x["job"] == "resnet18_eval"
             and x["cap_bytes"] and x["batch"] == r["fit"] and x["status"] == "ok")
    answer, verdict, _ = r["symbolic"]
    return (f"- resnet18_eval under the cap is decided by fragmentation: at its largest fit, batch "
            f"{r['fit']:,}, the allocator reserved {t['max_reserved'] >> 20:,} MiB for an allocated "
            f"peak of {t['max_allocated'] >> 20:,} MiB. The band is relative to the point estimate "
            f"and does not cover a pattern of cached blocks that the simulation does not reproduce "
            f"at every batch: `h200-timm`'s answer {answer:,} is {verdict}, where the trials ran "
            f"out from {r['fail']:,}.")


def max_batch_section():
    """memest --max-batch against the largest batches found by trials on the H100 (score_max_batch.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import score_max_batch  # noqa: E402 (a sibling script)
    path = ROOT / "datasets/h100-torch211/max-batch.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    memest = str(ROOT / "build/tools/memest")
    columns = [("h200-pytorch2.11-lazy", "symbolic"), ("h200-pytorch2.11-lazy", "analytical"),
               ("h200-timm", "symbolic")]
    scored = {c: score_max_batch.score(rows, memest, "h100-80gb", c[0], [c[1]]) for c in columns}
    lines = ["## Largest batch: memest --max-batch against trials on the H100", "",
             "`datasets/h100-torch211/max-batch.jsonl` brackets the largest batch of the five bundled "
             "jobs on a lent H100 80GB (PyTorch 2.11), on the whole GPU and under a 24 GiB "
             "`set_per_process_memory_fraction`: each trial a fresh process running the bundled "
             "model's PyTorch module at one batch (Adam, fp32, cross-entropy, 3 iterations; the eval "
             "job 3 forward passes). A **fit** ran, a **fail** ran out of memory. memest is **safe** "
             "when its answer is at most the largest fit (its shortfall in %), **over** when it is at "
             "least the smallest failure (a job placed on it crashes), **unresolved** in between. "
             "`h200-timm` carries a band fitted on the H200 rows, and \"fits\" is judged on its top "
             "(`--fit-on upper`, the default); the two `lazy` columns are the measured stack "
             "without a band. Nothing was fitted on these trials. Reproduce: "
             "`scripts/score_max_batch.py --markdown [--stack NAME]`.", "",
             "| job | limit | measured fit | measured fail | "
             + " | ".join(f"{b}, `{st}`" for st, b in columns) + " |",
             "|---|---|---:|---:|" + "---:|" * len(columns)]
    first = scored[columns[0]]
    for i, r in enumerate(first):
        cells = [r["job"], score_max_batch.limit_text(r["cap_bytes"]),
                 f"{r['fit']:,}" if r["fit"] else "-", f"{r['fail']:,}" if r["fail"] else "not found"]
        cells += [score_max_batch.answer_text(scored[c][i][c[1]]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for c in columns:
        tally = {v: sum(r[c[1]][1] == v for r in scored[c]) for v in ("safe", "over", "unresolved")}
        errors = [r[c[1]][2] for r in scored[c] if r[c[1]][2] is not None]
        lines.append(f"- {c[1]}, `{c[0]}`: " + ", ".join(f"{k} {v}" for k, v in tally.items())
                     + f", median error {statistics.median(errors):+.1f} %.")
    margins = ["0.5%", "1%", "2%", "3%"]
    swept = {m: score_max_batch.score(rows, memest, "h100-80gb", columns[0][0], ["symbolic"],
                                      [f"--safety-margin={m}"]) for m in margins}
    lines.append("- symbolic, `h200-pytorch2.11-lazy` with `--safety-margin` (a share of the GPU, "
                 "or of the limit under the cap), on the same 10 searches: " + "; ".join(
                     f"{m}: " + ", ".join(f"{v} {sum(r['symbolic'][1] == v for r in swept[m])}"
                                          for v in ("safe", "over", "unresolved"))
                     + ", median error {:+.1f} %".format(statistics.median(
                         r["symbolic"][2] for r in swept[m] if r["symbolic"][2] is not None))
                     for m in margins)
                 + ". Read off these rows, not validated on others: no margin is fitted or made a "
                 "default from them.")
    lines += ["- Where the symbolic step is exact to the tensor (ResNet-18/50 training: allocated "
              "peak within 0.5 % of the measured one at every batch tried), the point answer lands "
              "within a few batches of the boundary, on either side: the last batches are decided "
              "by what the allocator can still release when it runs out and by cuDNN falling back "
              "to algorithms with smaller workspaces. Only a margin or a band makes such an answer "
              "safe.",
              eval_capped_note(rows, scored[columns[2]]),
              "- The trials free the model output once the loss is computed; memest holds graph "
              "outputs to the end of the iteration (as a loop that keeps `logits` does). For the tiny "
              "GPT-2 that is one [batch, 128, 8192] fp32 tensor, so its answers are short by about "
              "that tensor's share (datasets/h100-torch211/README.md).", ""]
    return lines


def main():
    work = pathlib.Path(sys.argv[1])
    stacks = merge_stacks(work)
    out = ["# Device-level accuracy per stack", "",
           "<!-- Generated; do not edit. Regenerate with: bash scripts/calibrate_stacks.sh -->",
           "This page is written by `bash scripts/calibrate_stacks.sh`, which fits the stacks memest "
           "ships (docs/stacks.md) with `memest calibrate` on published device-level measurements "
           "(nvidia-smi's per-process peak) and scores them. **Held out** means: each group of "
           "jobs (a timm model family; a GPUMemNet architecture and data step) is predicted by a "
           "fit made without that group, so no scored row helped fit the stack that scores it. The "
           "band (interval) is checked the same way: each group against the band of the others.",
           ""]
    out += ["## Headline (held out)", "",
            "| stack | backend | jobs | groups | median | P90 | under by > 5 % (point) | under by > 5 % "
            "(upper bound) | band | band covers | targets |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name in STACKS:
        s = stacks[name]
        c = s["calibration"]
        for backend, key in [("symbolic", "held_out"), ("analytical", "held_out_analytical")]:
            h = c[key]
            band = s["bands"][backend]
            if name.endswith("gpumemnet"):
                ok = h["median_abs"] <= GPUMEMNET_MEDIAN_TARGET
                target = f"median ≤ 2 %: {'met' if ok else 'missed'}"
            else:
                met = (h["median_abs"] <= TARGETS["median"] and h["p90_abs"] <= TARGETS["p90"]
                       and h["upper_under_5pct"] <= TARGETS["upper_under_5pct"])
                target = ("median ≤ 8 %, P90 ≤ 20 %, ≤ 5 % of rows under by > 5 % with the "
                          f"upper bound: {'met' if met else 'missed'}")
            out.append(f"| `{name}` | {backend} | {c['jobs']:,} | {c['groups']} | "
                       f"{pct(h['median_abs'])} | {pct(h['p90_abs'])} | {pct(h['under_5pct'])} | "
                       f"{pct(h['upper_under_5pct'])} | {100 * band['low']:+.1f} % .. "
                       f"{100 * band['high']:+.1f} % | {pct(band['coverage'])} | {target} |")
    out += ["", "Errors are predicted / measured − 1 of the device peak (the stack is fitted with the "
            "symbolic backend; the analytical backend is scored under the same folds and has its "
            "own band); "
            "\"under\" is the share of jobs predicted below their measurement, the error a "
            "scheduler cannot forgive. The upper bound is the prediction times (1 + band high), "
            "what `fits` judges by default (`--fit-on upper`).", ""]

    out += ["## Before and after calibration", "",
            "| stack | errors | rows | median | P90 | under | under by > 5 % |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for name in STACKS:
        c = stacks[name]["calibration"]
        for label, key in [(f"default stack `{c['base_stack']}`, uncalibrated", "base"),
                           ("calibrated, in sample", "fitted"), ("calibrated, held out", "held_out"),
                           ("calibrated, held out, analytical", "held_out_analytical")]:
            e = c[key]
            out.append(f"| `{name}` | {label} | {e['rows']:,} | {pct(e['median_abs'])} | "
                       f"{pct(e['p90_abs'])} | {pct(e['under'])} | {pct(e['under_5pct'])} |")
    out.append("")

    # FakeTensor on the same timm rows.
    timm_rows = [r for r in csv.DictReader(open(ROOT / "datasets/timm-a100/jobs.csv"))
                 if r["censored"] == "0" and r["faketensor_mib"]]
    fake = summary([float(r["faketensor_mib"]) / float(r["measured_mib"]) - 1 for r in timm_rows])
    ours = [float(r["held_out_error"]) for r in
            csv.DictReader(open(work / "a100-40gb-timm.jobs.csv"))]
    mine = summary(ours)
    out += ["## Beside FakeTensor, on the same timm rows", "",
            "The published table carries, for every timm row, an estimate made with PyTorch's "
            "FakeTensor (forward + `output.sum().backward()`: no loss, optimizer, context or "
            "workspaces). Same rows, same truth (nvidia-smi on the A100):", "",
            "| estimator | rows | median | P90 | under | under by > 5 % |",
            "|---|---:|---:|---:|---:|---:|",
            f"| FakeTensor (published) | {fake['rows']} | {pct(fake['median'])} | "
            f"{pct(fake['p90'])} | {pct(fake['under'])} | {pct(fake['under_5pct'])} |",
            f"| memest symbolic, `a100-40gb-timm`, held out | {mine['rows']} | "
            f"{pct(mine['median'])} | {pct(mine['p90'])} | {pct(mine['under'])} | "
            f"{pct(mine['under_5pct'])} |", ""]

    no, total = timm_does_not_fit(work)
    out += ["## Jobs that did not fit", "",
            f"The timm table marks {total} jobs as filling the 40 GB GPU or crashing early "
            "(`censored`, or a peak below 0.95 × the same model's peak at a smaller batch; "
            "datasets/timm-a100/README.md). They are not fitted. With the calibrated stack and the "
            f"upper bound, memest says \"does not fit\" (exit 1) for {no} of them.", ""]

    levels = {d: compare_levels(d) for d in ("h200-torch211", "h100-torch211")}
    out += ["## Measured on an H200 and an H100, level by level, nothing fitted", "",
            "`datasets/h200-torch211/` and `datasets/h100-torch211/` hold our own measurements on "
            "a lent H200 and a lent H100 with the same software (PyTorch 2.11, CUDA 13.0, cuDNN "
            "9.19; timm and torchvision models trained with Adam in fp32, each in its own process; "
            "READMEs there). Every level is known there: the caching allocator's peaks "
            "(`max_memory_allocated`, `max_memory_reserved`) and NVML's per-process peak. "
            "Below, memest with the measured stack `h200-pytorch2.11-lazy` (context, library "
            "memory and convolution workspace read off the GPU, no value fitted to these rows), so "
            "every row is held out. Allocated and reserved depend on no fitted value (only the "
            "measured convolution workspace enters them): they check the graph, the training step "
            "and the allocator model.", "",
            "```", levels["h200-torch211"], "", levels["h100-torch211"], "```", "",
            f"The two GPUs read the same memory: {replicate_agreement()} "
            "(`datasets/h100-torch211/README.md`). The H100 rows are a "
            "second draw of the same jobs, not a new population; they confirm that the stack, "
            "measured on one Hopper GPU, holds on the other.", "",
            "Reproduce: `scripts/compare_levels.py datasets/h200-torch211 --stack "
            "h200-pytorch2.11-lazy` and the same with `datasets/h100-torch211` "
            "(after `datasets/timm-a100/unpack.sh`).", ""]

    out += cap_section()
    out += max_batch_section()

    out += ["## What was fitted", ""]
    for name in STACKS:
        s = stacks[name]
        c = s["calibration"]
        out += [f"### `{name}`", "", s["display_name"], "",
                f"- CUDA context: {s['cuda_context']['bytes'] / 2**20:.0f} MiB "
                f"({s['cuda_context']['source']})",
                f"- library memory: {s['library_memory']['bytes'] / 2**20:.0f} MiB "
                f"({s['library_memory']['source']})",
                f"- convolution workspace, spatial: {s['conv_workspace']['value']:g} × a call's "
                f"input + output + weight ({s['conv_workspace']['source']})",
                f"- convolution workspace, pointwise and depthwise: "
                f"{s['conv_workspace_pointwise']['value']:g} × the same "
                f"({s['conv_workspace_pointwise']['source']})",
                f"- a spatial convolution's weight-gradient call, beyond that: "
                f"{s.get('conv_weight_gradient_extra', {}).get('bytes', 0):,} B "
                f"({s.get('conv_weight_gradient_extra', {}).get('source', 'not in the file')})",
                f"- recurrent-layer workspace: {s.get('rnn_workspace', {}).get('value', 0):g} × a "
                f"layer's output ({s.get('rnn_workspace', {}).get('source', 'not in the file')})",
                *[f"- {b} band: {100 * v['low']:+.1f} % .. {100 * v['high']:+.1f} % "
                  f"({v['source']})" for b, v in s["bands"].items()],
                f"- data: {c['data']}; {c['jobs']:,} jobs; rows SHA-256 `{c['rows_sha256']}`; "
                f"fitted {c['date']}", ""]
    out += ["## Sources", "",
            "- H200 and H100 rows: measured for this project with `scripts/gpu_device_truth.py` on "
            "a lent NVIDIA H200 and a lent NVIDIA H100 on 2026-11-26 "
            "(`datasets/h200-torch211/README.md`, `datasets/h100-torch211/README.md`).",
            "- timm rows: GPUMemNet repository (itu-rad/GPUMemNet, Apache-2.0), the FakeTensor "
            "comparison table of E. Yousefzadeh-Asl-Miandoab et al.; the developers' half of its "
            "families, `datasets/timm-a100/README.md`.",
            "- MLP rows: E. Yousefzadeh-Asl-Miandoab, R. Karimzadeh, D. Yorulmaz, B. Ibragimov, "
            "P. Tözün, \"GPU Memory and Utilization Estimation for Training-Aware Resource "
            "Management: Opportunities and Limitations\", EuroMLSys 2026; data "
            "github.com/itu-rad/GPUMemNet Datasets/MLP, CC BY 4.0 (`datasets/gpumemnet/README.md`).",
            ""]
    (ROOT / "docs/accuracy-device.md").write_text("\n".join(out))
    print("wrote base/stacks.json and docs/accuracy-device.md")


if __name__ == "__main__":
    main()

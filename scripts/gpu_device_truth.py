#!/usr/bin/env python3
"""Device-level truth measured with PyTorch itself on a lent GPU (no memest build needed).

Policy: every number here is read off the GPU by the process that used it -- NVML's per-process
used memory (what nvidia-smi shows for the process), the caching allocator's statistics
(torch.cuda.memory_stats) -- never computed. Each model runs in its own process, so every row
starts from a fresh CUDA context and an empty caching allocator. Its outputs of
2026-11-26 are datasets/h200-torch211/device-truth.jsonl (H200) and
datasets/h100-torch211/device-truth.jsonl (H100); their READMEs say how they are used and what
they do not cover.

What it measures, one JSON object per line on stdout of the orchestrator (and in $OUT/results.jsonl):
  kind=env      the machine: GPU, driver, PyTorch, CUDA, cuDNN, timm, allocator settings.
  kind=context  per CUDA_MODULE_LOADING (LAZY, EAGER): the process's device memory after the
                context, after the first fp32 and bf16 matmul (cuBLAS/cuBLASLt), after the first
                convolution forward+backward (cuDNN) and after one ResNet-50 training step; with the
                allocator's reserved bytes beside it, so "used - reserved" is memory PyTorch does
                not own (context, loaded kernels, library handles).
  kind=conv     cuDNN convolution workspaces: for each shape, the allocator's peak during the
                forward and during the backward minus the tensors that call returns, with
                cudnn.benchmark off and on (first call and steady state).
  kind=train    one training configuration (Adam, fp32, cross-entropy, 3 iterations, inputs
                random): per iteration the allocator's peaks and the process's NVML used bytes.
                Models: torchvision CNNs/ViT and the timm models of datasets/timm-a100/models.csv,
                at the batches of that table; attention models again with timm's fused attention
                switched off.

  kind=lm_train, kind=lm_prefill (--suite lm): Hugging Face decoders built by transformers from
                the tests/data/hf configs (random weights): training rows (Adam, 3 iterations, eager
                and sdpa attention, fp32 and amp-bf16) and bf16 prefill rows (KV cache filled, the
                head on the last token); datasets/h100-lm-torch211/README.md states the protocol.
                --no-lm-train / --no-lm-prefill keep one kind; --slots sets the workers when two
                orchestrators share the GPU (each with its own --out).
  kind=lm_trace (--lm-trace CONFIG:ATTENTION:PRECISION:BxS,...): one training row run with the
                caching allocator's history recorded; the snapshot goes to OUT/trace-N.pickle.gz.
  kind=rnn (--suite rnn): what one recurrent layer (nn.LSTM / nn.GRU, batch-first, cuDNN) holds
                in training, per shape and dtype of rnn_specs(): the allocator's peak during the
                forward, what the forward leaves allocated beyond its outputs (what autograd keeps:
                cuDNN's reserve, a weight buffer), the peak during the backward beyond the gradients
                it returns; with the weights flattened into one buffer (`flat`, as a module keeps
                them) and as separate tensors (as memest-measure passes an ONNX graph's, which makes
                PyTorch copy them into a buffer each call). The rule for LSTM/GRU is to be stated
                from these (memest warns recurrent_layers until then).

Usage (on the device machine, from the repository root):
  python3 scripts/gpu_device_truth.py --out "$OUT" --deadline 430
  python3 scripts/gpu_device_truth.py --suite rnn --out "$OUT" --deadline 240
  python3 scripts/gpu_device_truth.py --suite rnn --rnn-grid "hidden=113;input=1024" --out "$OUT"
  python3 scripts/gpu_device_truth.py --suite lm --out "$OUT" --deadline 330 --cap-gib 36
A later call goes on where an earlier one's deadline stopped it: copy that call's results.jsonl into
the checkout (an untracked folder travels with it) and add --resume FILE (the context and conv
tasks and every finished model are skipped; datasets/h100-torch211/README.md did this).
A worker runs as: python3 scripts/gpu_device_truth.py worker '<task json>'.
"""
import argparse
import csv
import gc
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30

# ---------------------------------------------------------------------------------------------
# Worker side (runs in a fresh process per task)
# ---------------------------------------------------------------------------------------------
_NVML = None


def nvml_handle():
    global _NVML
    if _NVML is None:
        import pynvml
        pynvml.nvmlInit()
        _NVML = pynvml.nvmlDeviceGetHandleByIndex(0)
    return _NVML


def process_used():
    """NVML's used bytes of this process on GPU 0 (nvidia-smi's per-process column), or None."""
    try:
        import pynvml
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(nvml_handle()):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory) if p.usedGpuMemory is not None else None
    except Exception:  # noqa: BLE001 -- NVML absent or refusing is recorded as None
        return None
    return None


def device_used():
    """Whole-GPU used bytes (cudaMemGetInfo), or None."""
    import torch
    try:
        free, total = torch.cuda.mem_get_info()
        return int(total - free)
    except Exception:  # noqa: BLE001
        return None


def snapshot(torch):
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    used = process_used()
    reserved = int(st.get("reserved_bytes.all.current", 0))
    return {
        "process_used": used,
        "device_used": device_used(),
        "allocated": int(st.get("allocated_bytes.all.current", 0)),
        "reserved": reserved,
        "peak_allocated": int(st.get("allocated_bytes.all.peak", 0)),
        "peak_reserved": int(st.get("reserved_bytes.all.peak", 0)),
        "peak_requested": int(st.get("requested_bytes.all.peak", 0)),
        "outside_allocator": (used - reserved) if used is not None else None,
    }


def emit(rec):
    sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
    sys.stdout.flush()


def task_env(task):
    import torch
    rec = {"kind": "env", "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "python": sys.version.split()[0],
           "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
           "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
           "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
           "hostname": os.uname().nodename, "kernel": os.uname().release}
    for mod in ("torchvision", "timm", "transformers", "pynvml"):
        try:
            rec[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            rec[mod] = f"unavailable: {e}"
    p = torch.cuda.get_device_properties(0)
    rec.update({"gpu": p.name, "total_memory": int(p.total_memory),
                "compute_capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count})
    try:
        import pynvml
        h = nvml_handle()
        rec["driver"] = pynvml.nvmlSystemGetDriverVersion()
        if isinstance(rec["driver"], bytes):
            rec["driver"] = rec["driver"].decode()
        rec["nvml_total"] = int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
    except Exception as e:  # noqa: BLE001
        rec["driver"] = f"unavailable: {e}"
    # Does NVML report this process? (decides whether workers may share the GPU)
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rec["probe"] = snapshot(torch)
    rec["per_process_nvml"] = rec["probe"]["process_used"] is not None
    del x
    emit(rec)


def task_context(task):
    import torch
    import torch.nn.functional as F
    rec = {"kind": "context", "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
           "stages": {}}
    torch.cuda.init()
    x = torch.empty(1, device="cuda")
    rec["stages"]["context"] = snapshot(torch)
    a = torch.randn(1024, 1024, device="cuda")
    before = torch.cuda.memory_allocated()
    c = a @ a
    rec["stages"]["matmul_fp32"] = snapshot(torch)
    rec["stages"]["matmul_fp32"]["held_beyond_output"] = (
        torch.cuda.memory_allocated() - before - c.numel() * 4)
    ab = a.bfloat16()
    lin_w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    lin_b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    before = torch.cuda.memory_allocated()
    cb = F.linear(ab, lin_w, lin_b)  # addmm with bias: the cuBLASLt path
    rec["stages"]["linear_bf16"] = snapshot(torch)
    rec["stages"]["linear_bf16"]["held_beyond_output"] = (
        torch.cuda.memory_allocated() - before - cb.numel() * 2)
    xi = torch.randn(8, 64, 56, 56, device="cuda", requires_grad=True)
    wi = torch.randn(64, 64, 3, 3, device="cuda", requires_grad=True)
    y = F.conv2d(xi, wi, padding=1)
    y.sum().backward()
    rec["stages"]["conv_fwd_bwd"] = snapshot(torch)
    del y, xi, wi
    try:
        import torchvision
        m = torchvision.models.resnet50().cuda().train()
        opt = torch.optim.Adam(m.parameters())
        inp = torch.randn(8, 3, 224, 224, device="cuda")
        tgt = torch.randint(0, 1000, (8,), device="cuda")
        loss = F.cross_entropy(m(inp), tgt)
        loss.backward()
        opt.step()
        rec["stages"]["resnet50_step"] = snapshot(torch)
    except Exception as e:  # noqa: BLE001
        rec["stages"]["resnet50_step"] = {"error": repr(e)}
    emit(rec)


CONV_SHAPES = [
    # name, N, C, H, W, K, R, stride, pad, groups
    ("vgg_conv1_2", 32, 64, 224, 224, 64, 3, 1, 1, 1),
    ("vgg_conv2_2", 32, 128, 112, 112, 128, 3, 1, 1, 1),
    ("vgg_conv3_2", 32, 256, 56, 56, 256, 3, 1, 1, 1),
    ("vgg_conv4_2", 32, 512, 28, 28, 512, 3, 1, 1, 1),
    ("vgg_conv5_2", 32, 512, 14, 14, 512, 3, 1, 1, 1),
    ("vgg_conv1_1", 32, 3, 224, 224, 64, 3, 1, 1, 1),
    ("resnet_stem7x7s2", 32, 3, 224, 224, 64, 7, 2, 3, 1),
    ("resnet_1x1_256_64", 32, 256, 56, 56, 64, 1, 1, 0, 1),
    ("resnet_3x3_64", 32, 64, 56, 56, 64, 3, 1, 1, 1),
    ("resnet_3x3_128_s2", 32, 128, 56, 56, 128, 3, 2, 1, 1),
    ("resnet_1x1_1024_256", 32, 1024, 14, 14, 256, 1, 1, 0, 1),
    ("mbv2_dw3x3_96", 32, 96, 112, 112, 96, 3, 2, 1, 96),
    ("mbv2_dw3x3_144", 32, 144, 56, 56, 144, 3, 1, 1, 144),
    ("vgg_conv1_2_b8", 8, 64, 224, 224, 64, 3, 1, 1, 1),
    ("vgg_conv1_2_b128", 128, 64, 224, 224, 64, 3, 1, 1, 1),
    ("vgg_conv3_2_b8", 8, 256, 56, 56, 256, 3, 1, 1, 1),
    ("vgg_conv3_2_b128", 128, 256, 56, 56, 256, 3, 1, 1, 1),
]


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def conv_once(torch, F, shape, dtype):
    _, n, c, h, w, k, r, stride, pad, groups = shape
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype, requires_grad=True)
    wt = torch.randn(k, c // groups, r, r, device="cuda", dtype=dtype, requires_grad=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = F.conv2d(x, wt, None, stride, pad, 1, groups)
    torch.cuda.synchronize()
    out_bytes = nbytes([y])
    fwd = torch.cuda.max_memory_allocated() - base - out_bytes
    gy = torch.randn_like(y)
    torch.cuda.synchronize()
    base2 = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    gx, gw = torch.autograd.grad(y, (x, wt), gy)
    torch.cuda.synchronize()
    grad_bytes = nbytes([gx, gw])
    bwd = torch.cuda.max_memory_allocated() - base2 - grad_bytes
    res = {"fwd_workspace": int(fwd), "bwd_workspace": int(bwd), "output_bytes": int(out_bytes),
           "input_bytes": int(nbytes([x])), "reserved": torch.cuda.memory_reserved()}
    del x, wt, y, gy, gx, gw
    return res


def task_conv(task):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = bool(task["benchmark"])
    for shape in CONV_SHAPES:
        for dtype_name in task["dtypes"]:
            dtype = getattr(torch, dtype_name)
            rec = {"kind": "conv", "name": shape[0], "shape": list(shape[1:]), "dtype": dtype_name,
                   "benchmark": bool(task["benchmark"])}
            try:
                rec["first"] = conv_once(torch, F, shape, dtype)
                rec["steady"] = conv_once(torch, F, shape, dtype)
            except Exception as e:  # noqa: BLE001
                rec["error"] = repr(e)[:300]
            gc.collect()
            torch.cuda.empty_cache()
            emit(rec)


def make_model(task):
    import torch
    if task["source"] == "torchvision":
        import torchvision
        return getattr(torchvision.models, task["name"])(), "default"
    import timm
    try:
        return timm.create_model(task["name"], pretrained=False, drop_path_rate=0.0), "drop_path_rate=0"
    except TypeError:
        return timm.create_model(task["name"], pretrained=False), "default"


def logits_of(out):
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)):
        return out[0]
    return out


def run_batch(torch, model, task, batch):
    """One configuration: fresh Adam, 3 iterations; the allocator is emptied before and after."""
    c, h, w = task["input"]
    rec = {"batch": batch, "iterations": []}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, c, h, w, device="cuda")
    y = torch.randint(0, task["num_classes"], (batch,), device="cuda")
    crit = torch.nn.CrossEntropyLoss()
    rec["status"] = train_steps(torch, opt, lambda m: (crit(logits_of(model(x)), y), None), rec)
    rec["final"] = snapshot(torch)
    del opt, x, y
    release(torch, model, rec)
    return rec


def train_steps(torch, opt, loss_of, rec, micro_batches=1):
    """3 iterations, a snapshot after each: "ok", or "over_cap" at the first out-of-memory.
    loss_of(m) returns micro-batch m's loss and what the caller's loop keeps alive through backward
    (or None); with micro_batches K, each iteration accumulates K backwards of loss / K, then steps."""
    try:
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            for m in range(micro_batches):
                loss, held = loss_of(m)
                (loss / micro_batches if micro_batches > 1 else loss).backward()
                del loss, held
            opt.step()
            rec["iterations"].append(snapshot(torch))
    except torch.cuda.OutOfMemoryError:
        return "over_cap"
    return "ok"


def release(torch, model, rec):
    """Between rows: gradients dropped, the cache emptied, the peaks reset; what stays is read."""
    if model is not None:
        model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    rec["after_release"] = snapshot(torch)


def task_train(task):
    import torch
    torch.cuda.set_per_process_memory_fraction(task["cap_fraction"])
    torch.backends.cudnn.benchmark = False
    t0 = time.time()
    model, how = make_model(task)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    buffers = sum(b.numel() for b in model.buffers())
    # (vit_small_patch8_224 reported 0 classes in timm 1.0.29 and failed the 2026-11-26 run.)
    task["num_classes"] = getattr(model, "num_classes", 0) or 1000
    model = model.cuda().train()
    fused_modules = [m for m in model.modules() if getattr(m, "fused_attn", None) is True]
    base = {"kind": "train", "source": task["source"], "model": task["name"],
            "input": task["input"], "params": params, "trainable": trainable, "buffers": buffers,
            "created_with": how, "optimizer": "adam", "precision": "fp32", "loss": "cross-entropy",
            "cudnn_benchmark": False, "cap_bytes": task["cap_bytes"],
            "create_seconds": round(time.time() - t0, 2), "after_weights": snapshot(torch)}
    variants = [("fused" if fused_modules else "n/a", None)]
    if fused_modules and task.get("attn_toggle"):
        variants.append(("eager", False))
    for attn, flag in variants:
        if flag is not None:
            for m in fused_modules:
                m.fused_attn = flag
        for batch in task["batches"]:
            if time.time() > task["stop_at"]:
                emit(dict(base, batch=batch, attention=attn, status="skipped_deadline"))
                continue
            t1 = time.time()
            rec = run_batch(torch, model, task, batch)
            rec.update(base, attention=attn, seconds=round(time.time() - t1, 2))
            emit(rec)
            if rec["status"] != "ok":
                break


# ---------------------------------------------------------------------------------------------
# Language models (--suite lm): Hugging Face decoders built from tests/data/hf/*.json
# ---------------------------------------------------------------------------------------------
def lm_config(torch, task):
    """The transformers config of a tests/data/hf file, without the KV cache in training."""
    from transformers import AutoConfig
    with open(os.path.join(ROOT, "tests", "data", "hf", task["config"])) as f:
        raw = json.load(f)
    raw = {k: v for k, v in raw.items() if k not in ("torch_dtype", "dtype")}
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    cfg.use_cache = task["task"] != "lm_train"
    return cfg


def lm_model(torch, cfg, attention, dtype=None):
    """A randomly initialised *ForCausalLM on the GPU (fp32 unless dtype says) with the attention
    asked for."""
    from transformers import AutoModelForCausalLM
    dtype = dtype or torch.float32
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention, dtype=dtype)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention,
                                                     torch_dtype=dtype)
    if next(model.parameters()).dtype != dtype:
        model = model.to(dtype)
    return model


def lm_base(torch, task, model, t0):
    import transformers
    return {"kind": task["task"], "source": "transformers", "transformers": transformers.__version__,
            "model": task["config"], "params": sum(p.numel() for p in model.parameters()),
            "attention": task["attention"],
            "attention_used": getattr(model.config, "_attn_implementation", None),
            "cap_bytes": task["cap_bytes"], "create_seconds": round(time.time() - t0, 2),
            "after_weights": snapshot(torch)}


# A training variant of --lm-train-variants: tokens joined by "+". fp32 | amp-bf16 | bf16 (the
# model cast to bf16, Adam's state in bf16 too); hold (the logits kept alive through backward);
# fused (Adam(fused=True)); accumK (K micro-batches of batch / K per optimizer step); ckpt
# (transformers' gradient_checkpointing_enable, non-reentrant: every decoder layer recomputed in
# backward); topN (only the last N decoder layers train: every other parameter requires no grad).
def lm_variant(spec):
    v = {"variant": spec, "precision": "fp32", "hold_logits": False, "optimizer_impl": "foreach",
         "micro_batches": 1, "checkpointing": False, "top_layers": 0}
    for token in spec.split("+"):
        if token in ("fp32", "amp-bf16", "bf16"):
            v["precision"] = token
        elif token == "hold":
            v["hold_logits"] = True
        elif token == "fused":
            v["optimizer_impl"] = "fused"
        elif token == "ckpt":
            v["checkpointing"] = True
        elif re.fullmatch(r"accum[1-9][0-9]*", token):
            v["micro_batches"] = int(token[5:])
        elif re.fullmatch(r"top[1-9][0-9]*", token):
            v["top_layers"] = int(token[3:])
        else:
            raise ValueError(f"unknown training variant token {token!r} in {spec!r}")
    return v


def top_layers_regex(model, n):
    """The regular expression that matches the parameter names of the last n decoder layers
    (`.layers.<i>.` or GPT-2's `.h.<i>.`): the same names memest's --hf-config graph gives its
    initializers, so scripts/score_lm_truth.py passes it to memest --trainable as it is."""
    found = {(m.group(1), int(m.group(2))) for name, _ in model.named_parameters()
             for m in [re.search(r"\.(layers|h)\.(\d+)\.", name)] if m}
    word = min(found)[0]
    last = sorted(i for w, i in found if w == word)[-n:]
    return r"\.%s\.(%s)\." % (word, "|".join(str(i) for i in last))


def lm_train_batch(torch, model, task, batch, seq, variant):
    """Adam (foreach unless fused), 3 iterations; the loss is cross-entropy over every position (no
    shift). The variant's settings are undone on the model afterwards."""
    import torch.nn.functional as F
    v = variant
    rec = {"batch": batch, "seq": seq, "precision": v["precision"], "hold_logits": v["hold_logits"],
           "iterations": []}
    if v["variant"] not in FIRST_CALLS_VARIANTS:  # rows of those keep the first calls' fields
        rec.update(variant=v["variant"], optimizer_impl=v["optimizer_impl"],
                   micro_batches=v["micro_batches"], checkpointing=v["checkpointing"])
    if v["precision"] == "bf16":
        model.to(torch.bfloat16)
    trainable = top_layers_regex(model, v["top_layers"]) if v["top_layers"] else None
    for name, p in model.named_parameters():
        p.requires_grad_(trainable is None or re.search(trainable, name) is not None)
    if trainable:
        rec["trainable"] = trainable
        rec["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if v["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # The cast to bf16 above holds the fp32 and bf16 weights at once: not the row's peak. (Calls 13
    # and 14 of datasets/h100-lm-torch211 read their bf16 rows without this reset.)
    torch.cuda.reset_peak_memory_stats()
    rec["peaks_reset_at_start"] = True
    rec["start"] = snapshot(torch)
    vocab = model.config.vocab_size
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                           fused=v["optimizer_impl"] == "fused" or None)
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    labels = torch.randint(0, vocab, (batch, seq), device="cuda")
    amp = v["precision"] == "amp-bf16"
    micro = batch // v["micro_batches"]

    def loss_of(m):
        x, y = ids[m * micro:(m + 1) * micro], labels[m * micro:(m + 1) * micro]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            if v["hold_logits"]:  # `logits = model(x).logits` kept alive through backward
                logits = model(input_ids=x).logits
                return F.cross_entropy(logits.flatten(0, 1), y.flatten()), logits
            return F.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten()), None

    rec["status"] = train_steps(torch, opt, loss_of, rec, v["micro_batches"])
    rec["final"] = snapshot(torch)
    del opt, ids, labels
    if v["checkpointing"]:
        model.gradient_checkpointing_disable()
    for p in model.parameters():
        p.requires_grad_(True)
    if v["precision"] == "bf16" and not task.get("build_bf16"):
        model.float()
    release(torch, model, rec)
    return rec


def task_lm_train(task):
    import torch
    torch.cuda.set_per_process_memory_fraction(task["cap_fraction"])
    t0 = time.time()
    variants = [lm_variant(spec) for spec in task["variants"]]
    # Every variant in bf16: the model is made in bf16 (a 7B decoder's fp32 copy may not fit the cap).
    task["build_bf16"] = all(v["precision"] == "bf16" for v in variants)
    dtype = torch.bfloat16 if task["build_bf16"] else None
    model = lm_model(torch, lm_config(torch, task), task["attention"], dtype).train()
    base = dict(lm_base(torch, task, model, t0), optimizer="adam", loss="cross-entropy")
    for v in variants:
        for batch, seq in task["shapes"]:
            if time.time() > task["stop_at"]:
                emit(dict(base, batch=batch, seq=seq, precision=v["precision"],
                          hold_logits=v["hold_logits"], variant=v["variant"],
                          status="skipped_deadline"))
                continue
            if batch % v["micro_batches"]:
                continue
            t1 = time.time()
            rec = lm_train_batch(torch, model, task, batch, seq, v)
            rec.update(base, seconds=round(time.time() - t1, 2))
            emit(rec)
            if rec["status"] != "ok":
                break


def task_lm_trace(task):
    """One training row with the caching allocator's history recorded (torch.cuda.memory's
    _record_memory_history, Python frames at each malloc): every malloc and free of the 3
    iterations, with the segments, dumped as a gzipped pickle to task["path"] for a replay through
    memest's allocator model (scripts/allocator_history_events.py)."""
    import gzip
    import pickle
    import torch
    torch.cuda.set_per_process_memory_fraction(task["cap_fraction"])
    t0 = time.time()
    model = lm_model(torch, lm_config(torch, task), task["attention"]).train()
    base = dict(lm_base(torch, task, model, t0), optimizer="adam", loss="cross-entropy",
                trace=os.path.basename(task["path"]))
    batch, seq = task["shapes"][0]
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                             max_entries=400000)
    t1 = time.time()
    rec = lm_train_batch(torch, model, task, batch, seq, lm_variant(task["precision"]))
    with gzip.open(task["path"], "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
    torch.cuda.memory._record_memory_history(enabled=None)
    rec.update(base, seconds=round(time.time() - t1, 2), kind="lm_trace")
    emit(rec)


def lm_inference_model(torch, task, **fields):
    """(config, model, base row) of an inference task: the model made in bf16 directly (the rows
    of 2026-11-27 before call 5 built fp32 and cast: the same bf16 weights once the cache is
    emptied, but a 7B decoder's fp32 copy would not fit beside a second worker), the allocator's
    cache emptied and its peaks reset; `fields` go into the base row."""
    torch.cuda.set_per_process_memory_fraction(task["cap_fraction"])
    t0 = time.time()
    cfg = lm_config(torch, task)
    model = lm_model(torch, cfg, task["attention"], torch.bfloat16).eval()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return cfg, model, dict(lm_base(torch, task, model, t0), precision="bf16", **fields)


def task_lm_prefill(task):
    """Inference in bf16 weights: one forward that fills the KV cache, the head on the last token."""
    import torch
    cfg, model, base = lm_inference_model(torch, task, phase="prefill", logits="last")
    for batch, seq in task["shapes"]:
        if time.time() > task["stop_at"]:
            emit(dict(base, batch=batch, seq=seq, status="skipped_deadline"))
            continue
        t1 = time.time()
        rec = {"batch": batch, "seq": seq}
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
        try:
            with torch.no_grad():
                try:
                    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                except TypeError:
                    out = model(input_ids=ids, use_cache=True, num_logits_to_keep=1)
            rec["logits_shape"] = list(out.logits.shape)
            rec["after_forward"] = snapshot(torch)
            rec["status"] = "ok"
            del out
        except torch.cuda.OutOfMemoryError:
            rec["status"] = "over_cap"
        del ids
        release(torch, None, rec)
        rec.update(base, seconds=round(time.time() - t1, 2))
        emit(rec)
        if rec["status"] != "ok":
            break


DECODE_STEPS = 3


def task_lm_decode(task):
    """Inference in bf16 weights, the serving decode: for each (batch, past) a prefill of `past`
    random tokens fills transformers' default cache (DynamicCache), its logits are dropped, the
    allocator's cache is emptied and its peaks reset; then DECODE_STEPS steps of one token each
    (`use_cache=True`, the cache passed back in), a snapshot after each. steps[0] is the job
    "one decode step over `past` cached tokens"; the cache grows by one token per step."""
    import torch
    cfg, model, base = lm_inference_model(torch, task, phase="decode", seq=1)
    for batch, past in task["shapes"]:
        if time.time() > task["stop_at"]:
            emit(dict(base, batch=batch, past=past, status="skipped_deadline"))
            continue
        t1 = time.time()
        rec = {"batch": batch, "past": past, "steps": []}
        cache = None
        try:
            with torch.no_grad():
                ids = torch.randint(0, cfg.vocab_size, (batch, past), device="cuda")
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                del out, ids
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                rec["after_prefill"] = snapshot(torch)
                for _ in range(DECODE_STEPS):
                    ids = torch.randint(0, cfg.vocab_size, (batch, 1), device="cuda")
                    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
                    rec.setdefault("logits_shape", list(out.logits.shape))
                    cache = out.past_key_values
                    del out, ids
                    rec["steps"].append(snapshot(torch))
            rec["cache_class"] = type(cache).__name__
            rec["status"] = "ok"
        except torch.cuda.OutOfMemoryError:
            rec["status"] = "over_cap"
        cache = None
        release(torch, None, rec)
        rec.update(base, seconds=round(time.time() - t1, 2))
        emit(rec)
        if rec["status"] != "ok":
            break


# Decoders small enough for Adam in fp32 under the cap, smallest first. Shapes ascend in memory.
LM_CONFIGS = ["gpt2.json", "pythia-160m.RECONSTRUCTED.json", "qwen2.5-0.5b.json", "gpt2-medium.json",
              "qwen3-0.6b.json", "tinyllama-1.1b-chat-v1.0.json", "qwen2-1.5b-instruct.json"]
LM_TRAIN_SHAPES = [(1, 512), (4, 512), (1, 1024), (4, 1024)]
LM_TRAIN_VARIANTS = {"eager": ["fp32", "amp-bf16"], "sdpa": ["fp32", "amp-bf16", "fp32+hold"]}
FIRST_CALLS_VARIANTS = {v for specs in LM_TRAIN_VARIANTS.values() for v in specs}
LM_PREFILL_SHAPES = [(1, 1024), (8, 1024), (1, 2048), (8, 2048), (1, 8192), (1, 32768)]


def lm_tasks(stop_at, cap, total, configs=None, train_shapes=None, prefill=True, train=True,
             prefill_shapes=None, train_variants=None, decode_shapes=None):
    """One task per (config, attention) of training, one of prefill and one of decode per config.
    train_variants (lm_variant specs) replace LM_TRAIN_VARIANTS and run with sdpa only."""
    tasks = []
    by_attention = {"sdpa": train_variants} if train_variants else LM_TRAIN_VARIANTS
    for name in configs or LM_CONFIGS:
        with open(os.path.join(ROOT, "tests", "data", "hf", name)) as f:
            raw = json.load(f)
        longest = raw.get("max_position_embeddings") or raw.get("n_positions") or 2048
        common = {"config": name, "cap_bytes": cap, "cap_fraction": min(1.0, cap / total),
                  "stop_at": stop_at}
        for attention, variants in (by_attention.items() if train else ()):
            # Checkpointed variants get a process of their own: after transformers'
            # gradient_checkpointing_enable/_disable, a later row of the same model saved the
            # activations of its frozen layers (call 15 of datasets/h100-lm-torch211).
            for group in ([v for v in variants if "ckpt" not in v.split("+")],
                          [v for v in variants if "ckpt" in v.split("+")]):
                if group:
                    tasks.append(dict(common, task="lm_train", attention=attention, variants=group,
                                      shapes=[s for s in train_shapes or LM_TRAIN_SHAPES
                                              if s[1] <= longest]))
        if prefill:
            tasks.append(dict(common, task="lm_prefill", attention="sdpa",
                              shapes=[s for s in prefill_shapes or LM_PREFILL_SHAPES
                                      if s[1] <= longest]))
        if decode_shapes:
            tasks.append(dict(common, task="lm_decode", attention="sdpa",
                              shapes=[s for s in decode_shapes if s[1] + DECODE_STEPS <= longest]))
    return tasks


# --- kind=rnn ---------------------------------------------------------------------------------
RNN_GRID = {"hidden": (61, 256, 2048), "input": (64, 300), "seq": (32, 128), "batch": (64, 1024),
            "dirs": (1, 2)}


def parse_rnn_grid(text):
    """--rnn-grid "hidden=113,150;input=13,1024;seq=512;batch=256;dirs=1": the axes it names
    replace RNN_GRID's; an unknown axis or a value that is not a positive integer is an error."""
    grid = dict(RNN_GRID)
    for part in filter(None, text.split(";")):
        axis, _, values = part.partition("=")
        if axis not in RNN_GRID:
            raise ValueError(f"--rnn-grid: unknown axis {axis!r} (one of {', '.join(RNN_GRID)})")
        grid[axis] = tuple(int(v) for v in values.split(","))
        if not grid[axis] or min(grid[axis]) < 1:
            raise ValueError(f"--rnn-grid: {axis} needs positive integers")
    return grid


def rnn_specs(mode, dtype, grid=None):
    """The shapes of one rnn task, RNN_GRID by default: hidden sizes off and on powers of two, the
    zoo's input widths, short and long sequences, small and large batches, one and two
    directions."""
    g = grid or RNN_GRID
    return [{"mode": mode, "dtype": dtype, "hidden": h, "input": i, "seq": q, "batch": b, "dirs": d}
            for h in g["hidden"] for i in g["input"] for q in g["seq"] for b in g["batch"]
            for d in g["dirs"]]


def rnn_call(torch, spec, flat, device):
    """One training forward of a single recurrent layer: (run, inputs) where run() gives
    (y, states) and inputs are the tensors gradients are asked for (x and the weights)."""
    dtype = getattr(torch, spec["dtype"])
    cls = torch.nn.LSTM if spec["mode"] == "lstm" else torch.nn.GRU
    mod = cls(spec["input"], spec["hidden"], batch_first=True,
              bidirectional=spec["dirs"] == 2).to(device=device, dtype=dtype)
    x = torch.randn(spec["batch"], spec["seq"], spec["input"], device=device, dtype=dtype,
                    requires_grad=True)
    if flat:
        return (lambda: mod(x)), [x] + list(mod.parameters())
    # Separate weight tensors (not views of one buffer): PyTorch's cuDNN path copies them into a
    # weight buffer on every call, as it does for memest-measure's ONNX weights.
    params = [p.detach().clone().requires_grad_() for p in mod._flat_weights]
    h0 = torch.zeros(spec["dirs"], spec["batch"], spec["hidden"], device=device, dtype=dtype)
    if spec["mode"] == "lstm":
        def run():
            y, hy, cy = torch._VF.lstm(x, (h0, h0), params, True, 1, 0.0, True,
                                       spec["dirs"] == 2, True)
            return y, (hy, cy)
    else:
        def run():
            return torch._VF.gru(x, h0, params, True, 1, 0.0, True, spec["dirs"] == 2, True)
    return run, [x] + params


def rnn_once(torch, spec, flat):
    run, inputs = rnn_call(torch, spec, flat, "cuda")
    y, states = run()  # warm-up: cuDNN's plans and handles, not measured
    del y, states
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y, states = run()
    torch.cuda.synchronize()
    states = list(states) if isinstance(states, tuple) else [states]
    outputs = nbytes([y] + states)
    fwd_peak = torch.cuda.max_memory_allocated() - base
    held = torch.cuda.memory_allocated() - base - outputs
    gy = torch.randn_like(y)
    torch.cuda.synchronize()
    base2 = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    grads = torch.autograd.grad(y, inputs, gy)
    torch.cuda.synchronize()
    res = {"output_bytes": int(outputs), "forward_peak": int(fwd_peak), "held": int(held),
           "backward_peak": int(torch.cuda.max_memory_allocated() - base2),
           "grad_bytes": int(nbytes(grads)), "weight_bytes": int(nbytes(inputs[1:])),
           "input_bytes": int(nbytes(inputs[:1]))}
    del y, states, gy, grads, inputs, run
    return res


def task_rnn(task):
    import torch
    for spec in rnn_specs(task["mode"], task["dtype"], task.get("grid")):
        for flat in (True, False):
            rec = dict(spec, kind="rnn", flat=flat, cudnn=torch.backends.cudnn.version())
            try:
                rec.update(rnn_once(torch, spec, flat))
            except Exception as e:  # noqa: BLE001
                rec["error"] = repr(e)[:300]
            gc.collect()
            torch.cuda.empty_cache()
            emit(rec)


def task_fake(task):
    """MEMEST_DEVICE_TRUTH_FAKE=1: stub rows, to test the orchestrator on a machine without a GPU."""
    kind = task["task"]
    if kind == "env":
        emit({"kind": "env", "gpu": "fake", "total_memory": 80 * GIB, "per_process_nvml": True})
    elif kind in ("lm_train", "lm_prefill", "lm_trace", "lm_decode"):
        for spec in task.get("variants") or [None]:
            for b, q in task["shapes"]:
                row = {"kind": kind, "model": task["config"], "batch": b, "seq": q, "status": "ok"}
                emit(dict(row, variant=spec) if spec else row)
        time.sleep(0.3)
    elif kind == "train":
        for b in task["batches"]:
            emit({"kind": "train", "model": task["name"], "batch": b, "status": "ok"})
        time.sleep(0.3)
    else:
        emit({"kind": kind, "fake": True})


def worker_main(task_json):
    task = json.loads(task_json)
    if os.environ.get("MEMEST_DEVICE_TRUTH_FAKE") == "1":
        task_fake(task)
        return
    fn = {"env": task_env, "context": task_context, "conv": task_conv, "train": task_train,
          "lm_train": task_lm_train, "lm_prefill": task_lm_prefill,
          "lm_trace": task_lm_trace, "lm_decode": task_lm_decode, "rnn": task_rnn}[task["task"]]
    try:
        fn(task)
    except Exception as e:  # noqa: BLE001 -- the orchestrator records the failure as a row
        emit({"kind": "error", "task": task, "error": repr(e)[:500],
              "trace": traceback.format_exc()[-2000:]})
        sys.exit(1)


# ---------------------------------------------------------------------------------------------
# Orchestrator
# ---------------------------------------------------------------------------------------------
TORCHVISION = [("resnet50", (3, 224, 224)), ("vgg16", (3, 224, 224)),
               ("mobilenet_v2", (3, 224, 224)), ("resnet18", (3, 224, 224)),
               ("vit_b_16", (3, 224, 224)), ("densenet121", (3, 224, 224))]


def timm_models():
    path = os.path.join(ROOT, "datasets", "timm-a100", "models.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        out.append((r["model"], tuple(int(v) for v in r["input_shape"].split(","))))
    random.Random(7).shuffle(out)  # a spread of families if the deadline stops the list early
    return out


def finished_models(path):
    """Models whose train rows in an earlier results.jsonl all finished (ok or over_cap)."""
    seen, unfinished = set(), set()
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") != "train":
                continue
            seen.add(row["model"])
            if row.get("status") not in ("ok", "over_cap"):
                unfinished.add(row["model"])
    return seen - unfinished


class Pool:
    def __init__(self, results, log, slots, worker_timeout):
        self.results, self.log, self.slots, self.worker_timeout = results, log, slots, worker_timeout
        self.running = []
        self.count = 0
        self.tmp = tempfile.mkdtemp(prefix="device_truth_")

    def start(self, task, env=None):
        while len(self.running) >= self.slots:
            self.poll()
            time.sleep(0.2)
        full_env = dict(os.environ, **(env or {}))
        self.count += 1
        out_path = os.path.join(self.tmp, f"worker{self.count}.jsonl")
        with open(out_path, "w") as out:
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker",
                                  json.dumps(task)], stdout=out, stderr=self.log, env=full_env)
        self.running.append((p, task, time.time(), out_path))

    def poll(self):
        still = []
        for p, task, t0, out_path in self.running:
            if p.poll() is None and time.time() - t0 < self.worker_timeout:
                still.append((p, task, t0, out_path))
                continue
            if p.poll() is None:
                p.kill()
                p.wait()
                self.record({"kind": "error", "task": task, "error": "worker timed out"})
            for line in open(out_path).read().splitlines():
                line = line.strip()
                if line.startswith("{"):
                    self.record(json.loads(line))
            if p.returncode not in (0, 1, -9):
                self.record({"kind": "error", "task": task, "error": f"exit {p.returncode}"})
        self.running = still

    def record(self, rec):
        self.results.write(json.dumps(rec, sort_keys=True) + "\n")
        self.results.flush()
        brief = {k: rec.get(k) for k in ("kind", "model", "name", "batch", "seq", "precision",
                                         "status", "attention", "error") if k in rec}
        print(json.dumps(brief), flush=True)

    def drain(self, hard_stop):
        """Waits for every running worker; those still running at hard_stop are killed."""
        while self.running and time.time() < hard_stop:
            self.poll()
            time.sleep(0.2)
        saved, self.worker_timeout = self.worker_timeout, 0
        self.poll()
        self.worker_timeout = saved


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "worker":
        worker_main(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--suite", choices=("vision", "lm", "rnn"), default="vision",
                    help="vision: context, conv and the timm/torchvision models; lm: the"
                         " Hugging Face decoders of LM_CONFIGS (training and prefill); rnn: one"
                         " LSTM/GRU layer's memory over rnn_specs()")
    ap.add_argument("--lm-configs", default="", help="lm: tests/data/hf files, comma-separated")
    ap.add_argument("--lm-train-shapes", default="",
                    help="lm: BATCHxSEQ,... for the training rows (default LM_TRAIN_SHAPES)")
    ap.add_argument("--no-lm-prefill", action="store_true", help="lm: training rows only")
    ap.add_argument("--no-lm-train", action="store_true", help="lm: prefill rows only")
    ap.add_argument("--lm-prefill-shapes", default="",
                    help="lm: BATCHxSEQ,... for the prefill rows (default LM_PREFILL_SHAPES)")
    ap.add_argument("--lm-train-variants", default="",
                    help="lm: training variants, comma-separated, each tokens joined by '+' (fp32,"
                         " amp-bf16, bf16, hold, fused, accumK, ckpt, topN; lm_variant()); sdpa"
                         " only (default: eager fp32, amp-bf16; sdpa fp32, amp-bf16, fp32+hold)")
    ap.add_argument("--lm-decode-shapes", default="",
                    help="lm: BATCHxPAST,... decode rows (one token over PAST cached ones; none by"
                         " default)")
    ap.add_argument("--lm-trace", default="",
                    help="lm: CONFIG:ATTENTION:PRECISION:BATCHxSEQ,... training rows run with the"
                         " allocator's history recorded, each dumped to OUT/trace-N.pickle.gz")
    ap.add_argument("--rnn-grid", default="",
                    help='rnn: axes replacing the default grid, "hidden=113,150;input=13,1024"')
    ap.add_argument("--slots", type=int, default=0,
                    help="workers at a time (default: as many caps as fit the GPU, at most 4);"
                         " set it when another orchestrator shares the GPU")
    ap.add_argument("--deadline", type=float, default=430, help="seconds: no new task after")
    ap.add_argument("--hard-stop", type=float, default=500, help="seconds: workers killed")
    ap.add_argument("--cap-gib", type=float, default=32)
    ap.add_argument("--batches", default="8,32,128")
    ap.add_argument("--limit", type=int, default=0, help="only the first N models")
    ap.add_argument("--resume", default="",
                    help="results.jsonl of an earlier call: skip the context and conv tasks and"
                         " every model whose rows there all finished (ok or over_cap)")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    results = open(os.path.join(args.out, "results.jsonl"), "a")
    log = open(os.path.join(args.out, "workers.log"), "a")
    pool = Pool(results, log, 1, 120)

    pool.start({"task": "env"})
    pool.drain(t0 + 60)
    env_rows = [json.loads(l) for l in open(os.path.join(args.out, "results.jsonl"))
                if '"kind": "env"' in l]
    if not env_rows:
        print("no env row: the GPU or PyTorch did not start; stopping", flush=True)
        sys.exit(2)
    env = env_rows[-1]
    total = env["total_memory"]
    cap = int(args.cap_gib * GIB)
    slots = 1
    if env.get("per_process_nvml"):
        slots = max(1, min(4, int(total // (cap + 2 * GIB))))
    if args.slots:
        slots = args.slots
    print(f"GPU {env['gpu']} {total / GIB:.1f} GiB; per-process NVML {env.get('per_process_nvml')};"
          f" {slots} workers at a cap of {args.cap_gib} GiB", flush=True)

    if args.suite == "rnn":
        # The allocator's statistics are per process: workers may share the GPU.
        pool.slots = args.slots or 4
        pool.worker_timeout = 300
        for mode in ("lstm", "gru"):
            for dtype in ("float32", "bfloat16", "float16"):
                if time.time() > t0 + args.deadline:
                    pool.record({"kind": "rnn", "mode": mode, "dtype": dtype,
                                 "status": "not_started"})
                    continue
                pool.start({"task": "rnn", "mode": mode, "dtype": dtype,
                            "grid": parse_rnn_grid(args.rnn_grid)})
        pool.drain(t0 + args.hard_stop)
        print(f"done in {time.time() - t0:.0f} s", flush=True)
        return

    if args.suite == "lm":
        pool.slots = slots
        pool.worker_timeout = 240
        configs = [c for c in args.lm_configs.split(",") if c]
        def parse(text):
            return [tuple(int(v) for v in x.split("x")) for x in text.split(",") if x]
        variants = [v for v in args.lm_train_variants.split(",") if v]
        for v in variants:
            lm_variant(v)  # a mistyped variant stops here, not in a worker on the GPU
        tasks = lm_tasks(t0 + args.deadline, cap, total, configs, parse(args.lm_train_shapes),
                         not args.no_lm_prefill, not args.no_lm_train,
                         parse(args.lm_prefill_shapes), variants, parse(args.lm_decode_shapes))
        for n, spec in enumerate(x for x in args.lm_trace.split(",") if x):
            name, attention, precision, shape = spec.split(":")
            tasks.insert(n, {"task": "lm_trace", "config": name, "attention": attention,
                             "precision": precision, "cap_bytes": cap,
                             "cap_fraction": min(1.0, cap / total), "stop_at": t0 + args.deadline,
                             "shapes": [tuple(int(v) for v in shape.split("x"))],
                             "path": os.path.join(os.path.abspath(args.out),
                                                  f"trace-{n + 1}.pickle.gz")})
        for task in tasks:
            if time.time() > t0 + args.deadline:
                pool.record({"kind": task["task"], "model": task["config"],
                             "attention": task["attention"], "status": "not_started"})
                continue
            pool.start(task)
        pool.drain(t0 + args.hard_stop)
        print(f"done in {time.time() - t0:.0f} s", flush=True)
        return

    finished = finished_models(args.resume) if args.resume else None
    # Context and library memory first, alone on the GPU.
    for loading in (() if finished is not None else ("LAZY", "EAGER")):
        pool.start({"task": "context"}, env={"CUDA_MODULE_LOADING": loading})
        pool.drain(time.time() + 90)
    pool.slots = slots
    pool.worker_timeout = 150
    if finished is None:
        pool.start({"task": "conv", "benchmark": False, "dtypes": ["float32", "bfloat16"]})
        pool.start({"task": "conv", "benchmark": True, "dtypes": ["float32"]})

    batches = [int(b) for b in args.batches.split(",")]
    models = [("torchvision", n, s) for n, s in TORCHVISION] + [("timm", n, s) for n, s in timm_models()]
    if finished is not None:
        models = [m for m in models if m[1] not in finished]
    if args.limit:
        models = models[:args.limit]
    stop_at = t0 + args.deadline
    for source, name, shape in models:
        if time.time() > stop_at:
            pool.record({"kind": "train", "source": source, "model": name, "status": "not_started"})
            continue
        pool.start({"task": "train", "source": source, "name": name, "input": list(shape),
                    "batches": batches, "cap_bytes": cap, "cap_fraction": min(1.0, cap / total),
                    "attn_toggle": True, "stop_at": stop_at})
    pool.drain(t0 + args.hard_stop)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

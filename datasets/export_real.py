#!/usr/bin/python3
"""Export real architectures as weightless, training-mode ONNX graphs.

Usage:
    /usr/bin/python3 datasets/export_real.py [OUTPUT_DIR] [--only NAME ...]

OUTPUT_DIR defaults to datasets/real/ next to this script.

Needs Debian's /usr/bin/python3 (torch 1.13, torchvision 0.14, onnx 1.12).

Same approach as datasets/export_bundled.py (its export_one() is reused):
opset 17, TrainingMode.TRAINING, constant folding off (BatchNormalization
keeps its running-stat outputs, Dropout keeps its mask), a dynamic batch axis
named "batch" on the input and on "logits", doc strings cleared, weights
saved as external data and the .data file deleted.  Unlike the bundled
models, every initializer goes to external data (threshold 0 instead of
1 KiB: all initializers of these exports are float weights or buffers), which
keeps the committed graphs small.
export_one() runs the ONNX checker on the file before the data is dropped,
then the checker on a copy whose external weights are graph inputs, and
strict shape inference on the weightless graph.  This script additionally
runs shape inference with data propagation after binding the batch to 4 and
reports every node output left without a full static shape.

Models (torchvision architectures are BSD-3-Clause; weights are never used):
  resnet50, mobilenet_v2, mobilenet_v3_large, efficientnet_b0
  (stochastic_depth_prob=0, required for a training-mode export),
  densenet121, vgg16, vit_b_16 (torchvision), and two hand-written modules:
  bert_base (BERT-base-sized encoder: 12 layers, d 768, 12 heads, seq 128,
  vocab 30522, token + position + segment embeddings, post-LN, GELU, pooler and
  a 2-class head) and gpt2_small (GPT-2-small-sized decoder from
  export_bundled.TinyGPT2: 12 layers, d 768, 12 heads, seq 1024, vocab 50257,
  untied LM head).

The output is deterministic (fixed seeds, one thread, doc strings cleared).
"""

import math
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision

    import onnx
    import onnx.shape_inference

    import export_bundled
    from export_bundled import TRAIN, export_one, param_counts
except ImportError as e:  # pragma: no cover
    sys.exit(f"{e}: run this with Debian's /usr/bin/python3 "
             "(torch 1.13, torchvision 0.14, onnx 1.12)")


# --------------------------------------------------------------------------
# BERT-style encoder (hand-written attention: MatMul / Softmax)
# --------------------------------------------------------------------------

class BertSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, seq_len, p_drop):
        super().__init__()
        self.h = n_heads
        self.d = d_model // n_heads
        self.t = seq_len
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(p_drop)
        self.out = nn.Linear(d_model, d_model)
        self.out_drop = nn.Dropout(p_drop)

    def forward(self, x):
        b = x.shape[0]
        t, h, d = self.t, self.h, self.d
        q = self.query(x).reshape(b, t, h, d).transpose(1, 2)
        k = self.key(x).reshape(b, t, h, d).transpose(1, 2)
        v = self.value(x).reshape(b, t, h, d).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        att = self.drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, h * d)
        return self.out_drop(self.out(y))


class BertLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, seq_len, p_drop):
        super().__init__()
        self.attn = BertSelfAttention(d_model, n_heads, seq_len, p_drop)
        self.ln1 = nn.LayerNorm(d_model, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(),
                                 nn.Linear(d_ff, d_model), nn.Dropout(p_drop))
        self.ln2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ffn(x))


class BertClassifier(nn.Module):
    def __init__(self, vocab=30522, seq_len=128, d_model=768, n_heads=12,
                 n_layers=12, d_ff=3072, n_types=2, n_classes=2, p_drop=0.1):
        super().__init__()
        self.seq_len = seq_len
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.typ = nn.Embedding(n_types, d_model)
        self.ln = nn.LayerNorm(d_model, eps=1e-12)
        self.drop = nn.Dropout(p_drop)
        self.layers = nn.ModuleList(
            [BertLayer(d_model, n_heads, d_ff, seq_len, p_drop) for _ in range(n_layers)])
        self.pool = nn.Linear(d_model, d_model)
        self.cls_drop = nn.Dropout(p_drop)
        self.cls = nn.Linear(d_model, n_classes)

    def forward(self, input_ids):
        pos = torch.arange(self.seq_len, dtype=torch.long, device=input_ids.device)
        # Single-segment input: every token type is 0 (one row of the table).
        typ = torch.zeros(self.seq_len, dtype=torch.long, device=input_ids.device)
        x = self.tok(input_ids) + self.pos(pos) + self.typ(typ)
        x = self.drop(self.ln(x))
        for layer in self.layers:
            x = layer(x)
        pooled = torch.tanh(self.pool(x[:, 0]))
        return self.cls(self.cls_drop(pooled))


# --------------------------------------------------------------------------
# Model table
# --------------------------------------------------------------------------

def tv(name, **kw):
    def make():
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(weights=None, **kw)
    return make


def make_bert():
    torch.manual_seed(0)
    return BertClassifier()


def make_gpt2():
    torch.manual_seed(0)
    return export_bundled.TinyGPT2(vocab=50257, seq_len=1024, d_model=768,
                                   n_heads=12, n_layers=12, p_drop=0.1)


def image(res):
    return lambda: torch.randn(2, 3, res, res)


def tokens(vocab, seq):
    return lambda: torch.randint(0, vocab, (2, seq), dtype=torch.long)


# (name, factory, input name, example input)
MODELS = [
    ("resnet50", tv("resnet50"), "input", image(224)),
    ("mobilenet_v2", tv("mobilenet_v2"), "input", image(224)),
    ("mobilenet_v3_large", tv("mobilenet_v3_large"), "input", image(224)),
    ("efficientnet_b0", tv("efficientnet_b0", stochastic_depth_prob=0.0), "input", image(224)),
    ("densenet121", tv("densenet121"), "input", image(224)),
    ("vgg16", tv("vgg16"), "input", image(224)),
    ("vit_b_16", tv("vit_b_16"), "input", image(224)),
    ("bert_base", make_bert, "input_ids", tokens(30522, 128)),
    ("gpt2_small", make_gpt2, "input_ids", tokens(50257, 1024)),
]


def unshaped_outputs(model, batch=4):
    """Node outputs without a full static shape after binding batch."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = batch
    m = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
    full = set()
    for vi in list(m.graph.value_info) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            full.add(vi.name)
    return [o for n in m.graph.node for o in n.output if o and o not in full]


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    only = []
    if "--only" in argv:
        only = argv[argv.index("--only") + 1:]
        args = [a for a in args if a not in only]
    out_dir = args[0] if args else os.path.join(HERE, "real")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.use_deterministic_algorithms(True)
    export_bundled.EXTERNAL_THRESHOLD = 0  # read by export_one(): every initializer external

    for name, factory, input_name, make_input in MODELS:
        if only and name not in only:
            continue
        fname = f"{name}_train.onnx"
        path, m = export_one(out_dir, fname, factory, input_name, make_input, TRAIN)
        trainable, total = param_counts(m)
        missing = unshaped_outputs(m)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{fname}: {os.path.getsize(path)} bytes, {len(m.graph.node)} nodes, "
              f"params {trainable:,} trainable-looking / {total:,} total, "
              f"outputs without a full shape at batch 4: {len(missing)}"
              + (f" (first: {missing[:3]})" if missing else ""))
        print(f"    ops: {' '.join(ops)}")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)

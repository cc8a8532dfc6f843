#!/usr/bin/python3
"""Regenerate the weightless example ONNX graphs bundled with memest.

Usage:
    /usr/bin/python3 datasets/export_bundled.py [OUTPUT_DIR]

OUTPUT_DIR defaults to datasets/models/ next to this script.

Needs Debian's /usr/bin/python3 (torch 1.13, torchvision 0.14, onnx 1.12);
the pyenv `python3` on PATH has no torch.

Every model is exported with opset 17 and a dynamic batch axis named "batch".
Training graphs use TrainingMode.TRAINING with constant folding off, so
BatchNormalization keeps its running-stat outputs and Dropout nodes stay in
the graph.  Weights are saved as external data (tensors of 1 KiB or more) and
the .data file is then deleted: the committed .onnx files hold only the graph,
its Constant nodes and the initializers under 1 KiB.  They still
reference the missing <file>.onnx.data on purpose; memest never opens it.

The output is deterministic: running the script twice gives byte-identical
.onnx files (seeds fixed, single-threaded, doc strings cleared).
"""

import io
import os
import sys
import warnings

try:
    import torch

    import onnx
    import onnx.checker
    import onnx.helper
    import onnx.shape_inference

    from bundled_modules import (TinyGPT2, make_gpt2_tiny, make_mlp_small,  # noqa: F401
                                 make_resnet18)
except ImportError as e:  # pragma: no cover
    sys.exit(f"{e}: run this with Debian's /usr/bin/python3 "
             "(torch 1.13, torchvision 0.14, onnx 1.12)")

OPSET = 17
EXTERNAL_THRESHOLD = 1024  # bytes; smaller tensors stay embedded in the graph


# --------------------------------------------------------------------------
# Model table
# --------------------------------------------------------------------------

TRAIN = torch.onnx.TrainingMode.TRAINING
EVAL = torch.onnx.TrainingMode.EVAL

# (file name, factory, input name, example input, training mode)
MODELS = [
    ("resnet18_train.onnx", make_resnet18, "input",
     lambda: torch.randn(2, 3, 224, 224), TRAIN),
    ("gpt2_tiny_train.onnx", make_gpt2_tiny, "input_ids",
     lambda: torch.randint(0, 8192, (2, 128), dtype=torch.long), TRAIN),
    ("mlp_small_train.onnx", make_mlp_small, "input",
     lambda: torch.randn(2, 784), TRAIN),
    ("resnet18_eval.onnx", make_resnet18, "input",
     lambda: torch.randn(2, 3, 224, 224), EVAL),
]


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------

def export_one(out_dir, fname, factory, input_name, make_input, mode):
    model = factory()
    training = mode == TRAIN
    model.train(training)
    torch.manual_seed(0)
    example = make_input()

    buf = io.BytesIO()
    torch.onnx.export(
        model, (example,), buf,
        export_params=True,
        training=mode,
        do_constant_folding=not training,
        opset_version=OPSET,
        input_names=[input_name],
        output_names=["logits"],
        dynamic_axes={input_name: {0: "batch"}, "logits": {0: "batch"}},
    )
    proto = onnx.load_from_string(buf.getvalue())
    # torch 1.13 already writes producer "pytorch" "1.13.0" and empty doc
    # strings; clear them anyway so the bytes depend on the graph alone.
    proto.doc_string = ""
    proto.graph.doc_string = ""
    for node in proto.graph.node:
        node.doc_string = ""

    path = os.path.join(out_dir, fname)
    data_name = fname + ".data"
    data_path = os.path.join(out_dir, data_name)
    for p in (path, data_path):
        if os.path.exists(p):
            os.remove(p)
    onnx.save_model(proto, path,
                    save_as_external_data=True,
                    all_tensors_to_one_file=True,
                    location=data_name,
                    size_threshold=EXTERNAL_THRESHOLD)
    # The path-based checker insists that the external data file exists
    # (onnx >= 1.12), so run it before the data is dropped.
    onnx.checker.check_model(path)
    # Weightless: drop the tensor data, keep only the graph.
    os.remove(data_path)

    # Sanity checks on the committed file as memest sees it (no weights).
    loaded = onnx.load(path, load_external_data=False)
    onnx.checker.check_model(weights_as_inputs(loaded))
    onnx.shape_inference.infer_shapes(loaded, check_type=True, strict_mode=True)
    return path, loaded


def weights_as_inputs(model):
    """Copy of `model` whose external initializers are graph inputs instead.

    onnx 1.12's checker stat()s the external data file of every external
    tensor (relative to the model's folder, or to the working directory for
    an in-memory proto), so a weightless model cannot pass it as is.  Turning
    the missing weights into typed graph inputs keeps every other check
    (topology, op schemas, attribute types) and needs no file.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = []
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            m.graph.input.append(
                onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    return m


def param_counts(model):
    """(trainable-looking, total) element counts of the initializers.

    Uses dims only (the data is not there).  "Trainable-looking" counts the
    floating-point initializers that do not feed BatchNormalization inputs
    3/4 (running mean / running variance, which are buffers in PyTorch).
    """
    g = model.graph
    bn_stats = set()
    for n in g.node:
        if n.op_type == "BatchNormalization":
            for i in (3, 4):
                if i < len(n.input) and n.input[i]:
                    bn_stats.add(n.input[i])
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
              onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    total = trainable = 0
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        total += n
        if t.data_type in floats and t.name not in bn_stats:
            trainable += n
    return trainable, total


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = argv[1] if len(argv) > 1 else os.path.join(here, "models")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    # torch 1.13 warns once per BN about dropping the num_batches_tracked update.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
    torch.use_deterministic_algorithms(True)

    for fname, factory, input_name, make_input, mode in MODELS:
        path, m = export_one(out_dir, fname, factory, input_name, make_input, mode)
        trainable, total = param_counts(m)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{fname}: {os.path.getsize(path)} bytes, "
              f"{len(m.graph.node)} nodes, "
              f"params {trainable:,} trainable-looking / {total:,} total")
        print(f"    ops: {' '.join(ops)}")


if __name__ == "__main__":
    main(sys.argv)

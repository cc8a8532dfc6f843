"""memest: predicts the GPU memory of a deep-learning job before it runs.

    import memest
    model = memest.load("resnet18_train.onnx")          # a path, or the bytes of an ONNX model
    e = memest.estimate(model, batch=64, gpu="a100-40gb", precision="amp-bf16")
    print(e.peak_device, e.fit.fits, e.to_dict())
    batch, at = memest.max_batch(model, gpu="l4-24gb")

Options are keyword arguments with the keys of the CLI's JSON "options" object
(docs/json-schema.md): mode, batch, dims, optimizer, precision, gpu, attention, trainable, freeze,
micro_batches, checkpoint_segments, fit={"margin_fraction": 0.05}, parallel={"world_size": 8,
"sharding": "zero2"}, ... An unknown key or value raises memest.Error (never a silent default).
Backends: "analytical" (default), "symbolic", "learned".
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence, Tuple, Union

from . import _memest

__version__ = _memest.__version__
Error = _memest.Error  # the message starts with the error code: "invalid_argument: ..."
Model = _memest.Model


@dataclass(frozen=True)
class Breakdown:
    """The device-level peak split into parts (bytes); the fields sum to peak_device."""
    weights: int
    gradients: int
    optimizer_state: int
    saved_activations: int
    transient: int
    allocator_overhead: int
    cached_free: int
    cuda_context: int
    library_memory: int
    unaccounted: int
    collective_buffers: int
    nccl_buffers: int


@dataclass(frozen=True)
class Fit:
    """Whether the estimate fits the options' GPU, under the options' fit policy."""
    fits: bool
    capacity: int
    headroom: int  # negative: over by that much
    judged: int
    on: str
    margin: int


@dataclass(frozen=True)
class Estimate:
    backend: str
    peak_allocated: int
    peak_reserved: int
    peak_device: int
    breakdown: Breakdown
    peak_phase: str
    peak_node: str
    interval: Optional[Tuple[Optional[int], Optional[int]]]
    fit: Fit
    diagnostics: list = field(default_factory=list)
    ranks: list = field(default_factory=list)  # many GPUs: one dict per pipeline stage
    host_bytes: int = 0
    phases: list = field(default_factory=list)  # analytical training: one dict per phase

    def to_dict(self) -> dict:
        return asdict(self)


def _estimate_from_json(text: str) -> Estimate:
    j = json.loads(text)
    interval = j.get("interval")
    return Estimate(
        backend=j["backend"],
        peak_allocated=j["peak"]["allocated"],
        peak_reserved=j["peak"]["reserved"],
        peak_device=j["peak"]["device"],
        breakdown=Breakdown(**j["breakdown"]),
        peak_phase=j["peak_phase"],
        peak_node=j["peak_node"],
        interval=None if interval is None else (interval["low"], interval["high"]),
        fit=Fit(**j["fit"]),
        diagnostics=j.get("diagnostics", []),
        ranks=j.get("ranks", []),
        host_bytes=j.get("host_bytes", 0),
        phases=j.get("phases", []),
    )


def load(source: Union[str, bytes, bytearray, "os.PathLike"], name: str = "<bytes>") -> Model:
    """Loads and validates an ONNX model from a path or from its bytes."""
    if isinstance(source, (bytes, bytearray)):
        return _memest.load_bytes(bytes(source), name)
    return _memest.load_file(str(source))


def estimate(model: Model, backend: str = "analytical", **options: Any) -> Estimate:
    """One estimate of `model` under `options` (see the module docstring)."""
    return _estimate_from_json(_memest.estimate(model, backend, json.dumps(options)))


def max_batch(model: Model, backend: str = "analytical", **options: Any) -> Tuple[int, Estimate]:
    """The largest batch that fits options' GPU (0: not even 1), and the estimate at it."""
    batch, _evaluations, text = _memest.max_batch(model, backend, json.dumps(options))
    return batch, _estimate_from_json(text)


def pack(jobs: Sequence[Tuple[Model, dict]], gpu: str, gpus: int = 0, mps: bool = False,
         backend: str = "analytical") -> dict:
    """Colocation (memest/pack.h): jobs as (model, options) pairs on GPU profile `gpu`. gpus=0:
    whether they fit on one GPU together; gpus=M: their placement on M GPUs (first-fit / best-fit
    decreasing); mps=True: as MPS clients sharing one CUDA context. Returns the memest.pack/1
    document as a dict (jobs are named "job 0", "job 1", ... in the order given)."""
    models = [m for m, _ in jobs]
    options = [json.dumps(o) for _, o in jobs]
    return json.loads(_memest.pack(models, options, backend, gpu, gpus, mps))


def from_torch(module: "torch.nn.Module", example_inputs: Sequence[Any],
               backend: str = "analytical", opset: int = 17, **options: Any) -> Estimate:
    """Exports a live torch.nn.Module in training mode, in memory (the README's recipe: training
    graph, no constant folding, dim 0 of every input named "batch"), and estimates it. `batch`
    defaults to dim 0 of the first example input."""
    import io

    import torch

    inputs = tuple(example_inputs)
    names = [f"input_{i}" for i in range(len(inputs))]
    buffer = io.BytesIO()
    torch.onnx.export(module, inputs, buffer, input_names=names,
                      dynamic_axes={n: {0: "batch"} for n in names},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      opset_version=opset)
    options.setdefault("batch", int(inputs[0].shape[0]))
    return estimate(load(buffer.getvalue(), type(module).__name__), backend, **options)


__all__ = ["Breakdown", "Error", "Estimate", "Fit", "Model", "estimate", "from_torch", "load",
           "max_batch", "pack"]

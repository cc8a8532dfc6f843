#!/usr/bin/python3
"""PyTorch's own request stream for a ResNet-18 training step, as a CUDA run would make it.

    /usr/bin/python3 scripts/cpu_request_stream.py --batch 32 [--inplace] > FILE.events

Records three Adam steps (foreach, zero_grad(set_to_none=True), cross-entropy) of torchvision's
ResNet-18 -- written out here, since Debian has no torchvision -- with PyTorch's profiler on the
CPU (profile_memory: every allocation and free, with the op it happened in), and writes the
requests a CUDA run of the same step makes, for replay through memest's caching-allocator model
(tests/unit/allocator_history_test.cc). No GPU is needed; what the CPU run does differently is
turned into what PyTorch 2.x does on CUDA (docs/memory-model.md section 2.5 says what this
showed):

  * A convolution's and a batch norm's own scratch (allocated and freed inside the CPU kernel,
    oneDNN's reorders) is dropped; what the kernel returns is kept. Each cuDNN call's workspace is
    written as a `w` line that the replay sizes with memest's rule (memory::ConvWorkspaceRule):
    the forward call after its output; in backward, as cudnn_convolution_backward runs them
    (aten/src/ATen/native/cudnn/ConvShared.cpp), the data-gradient call after the input's
    gradient and the weight-gradient call after the weight's.
  * cuBLAS's workspace (32 MiB on Hopper, docs/memory-model.md section 2.3): one after the first
    GEMM of the forward (the main thread's handle), one after the first of the backward (the
    autograd thread's); both kept.
  * A gradient that reaches a tensor from two paths: PyTorch 1.13 adds them out of place; 2.x
    adds the newer one into the older buffer when nothing else holds the older one
    (torch/csrc/autograd/input_buffer.cpp, accumulate), as a CUDA trace of GPT-2 shows: the old
    buffer is kept, the new one freed. This script takes every such sum to be in place (in
    ResNet-18 nothing else holds the older buffer by then).
  * Adam: 2.x keeps `step` on the host and adds eps in place, so the host scalars (8 bytes or
    less) and 1.13's out-of-place _foreach_add are dropped, as are the temporaries of the
    in-place foreach ops (the CPU's per-tensor fallback); the _foreach_sqrt copies are kept.

--inplace keeps torchvision's ReLU(inplace=True) and `out += identity`; without it, both run out
of place, which is what an exported ONNX graph says (the graph cannot tell). A convolution's kind
is read off its weight's shape alone (ResNet-18 has no grouped convolution), and in backward the
input's gradient is the request of the input's size that comes first.

Output lines: `a ID BYTES` (a request), `f ID` (its free), `w ID KIND PASS IN OUT WEIGHT` (a
cuDNN workspace request: KIND s/p/d for spatial, pointwise, depthwise; PASS f/d/w for forward,
data gradient, weight gradient; the call's input, output and weight bytes), `i LABEL` (an
iteration ended). The first lines allocate the parameters and buffers, in the order
`model.cuda()` moves them.
"""
import argparse
import math
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

CUBLAS_WORKSPACE = 32 << 20  # Hopper (docs/memory-model.md section 2.3)
CONV_OPS = ("aten::convolution", "aten::convolution_backward")
KERNELS_WITH_SCRATCH = CONV_OPS + ("aten::native_batch_norm", "aten::native_batch_norm_backward")


class Basic(nn.Module):
    def __init__(self, cin, cout, stride, inplace):
        super().__init__()
        self.inplace = inplace
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=inplace)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)  # after, as torchvision
        if self.inplace:
            out += identity
        else:
            out = out + identity
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's modules, in its registration order."""

    def __init__(self, inplace):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=inplace)
        self.maxpool = nn.MaxPool2d(3, 2, 1)

        def layer(cin, cout, stride):
            return nn.Sequential(Basic(cin, cout, stride, inplace), Basic(cout, cout, 1, inplace))

        self.layer1, self.layer2 = layer(64, 64, 1), layer(64, 128, 2)
        self.layer3, self.layer4 = layer(128, 256, 2), layer(256, 512, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def record(batch, inplace):
    """The profiler's allocation events in time order: (ptr, bytes, stack of op nodes)."""
    torch.manual_seed(0)
    model = ResNet18(inplace).train()
    weights = [t.numel() * t.element_size() for m in model.modules()
               for t in list(m._parameters.values()) + list(m._buffers.values()) if t is not None]
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
    loss_fn = nn.CrossEntropyLoss()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as p:
        x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))
        for it in range(3):
            with torch.profiler.record_function(f"iteration{it + 1}"):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                del loss
                opt.step()
    events = []

    def walk(e, stack):
        kind = type(e.extra_fields).__name__
        if kind == "_ExtraFields_Allocation":
            events.append((e.start_time_ns, e.extra_fields.ptr, e.extra_fields.alloc_size, stack))
            return
        shapes = None
        if kind == "_ExtraFields_TorchOp":
            shapes = [list(s) if isinstance(s, list) else None for s in e.extra_fields.inputs.shapes]
        node = (e.name, (e.name, e.start_time_ns, len(stack)), shapes)  # an op call, once
        for c in e.children:
            walk(c, stack + [node])

    for e in p.profiler.kineto_results.experimental_event_tree():
        walk(e, [])
    events.sort(key=lambda r: r[0])
    return weights, [(ptr, size, stack) for _, ptr, size, stack in events]


def scratch_group(stack):
    """The kernel (or in-place foreach op) whose own scratch this event would be, or None."""
    for name, ident, shapes in stack:
        if name in KERNELS_WITH_SCRATCH:
            return (name, ident, shapes)
        if name.startswith("aten::_foreach_") and name != "aten::_foreach_sqrt":
            return (name, ident, shapes)
    return None


def nbytes(shape):
    return 4 * math.prod(shape)  # fp32


def conv_kind(weight_shape):
    """s (spatial) or p (pointwise); ResNet-18 has no depthwise convolution."""
    return "p" if all(k == 1 for k in weight_shape[2:]) else "s"


def dropped(events):
    """Indices of the events a CUDA run does not make (the policy above)."""
    out, open_at = set(), {}
    for i, (ptr, size, stack) in enumerate(events):
        g = scratch_group(stack)
        if size > 0:
            open_at[ptr] = (i, g)
            continue
        a = open_at.pop(ptr, None)
        if a is None:
            continue
        alloc_i, alloc_g = a
        if alloc_g is not None and g is not None and alloc_g[1] == g[1]:  # the same call
            out.update((alloc_i, i))  # freed inside the kernel that made it: its scratch
        elif alloc_g is not None and alloc_g[0] == "aten::_foreach_add":
            out.update((alloc_i, i))  # 1.13's out-of-place eps add
    return out


def convert(weights, events, out):
    ids = iter(range(1, 1 << 40))
    for w in weights:
        out.append(f"a {next(ids)} {w}")
    skip = dropped(events)
    live, cublas, iteration = {}, set(), None
    calls_made = {}  # a convolution backward's calls so far, by its op call
    # Accumulation: an `add` right under the engine's evaluate_function, then its two operands'
    # frees; kept as the older operand, the newer freed (2.x's in-place accumulate).
    alias, pending_add = {}, None
    for i, (ptr, size, stack) in enumerate(events):
        names = [n for n, _, _ in stack]
        it = next((n for n in names if n.startswith("iteration")), None)
        if it and it != iteration:
            if iteration:
                out.append(f"i {iteration}")
            iteration = it
        if i in skip:
            continue
        if size > 0:
            if "Optimizer.step#Adam.step" in names and size <= 8:
                live[ptr] = None  # a host scalar on CUDA
                continue
            k = next(ids)
            live[ptr] = k
            if (len(names) >= 2 and names[-1] == "aten::add" and
                    names[-2].startswith("autograd::engine::evaluate_function")):
                pending_add = (k, [])
                continue
            out.append(f"a {k} {size}")
            for tag in ("aten::linear", "AddmmBackward0"):
                if tag in names and tag not in cublas:
                    cublas.add(tag)
                    out.append(f"a {next(ids)} {CUBLAS_WORKSPACE}")
            write_workspace(stack, size, ids, out, calls_made)
            continue
        k = live.pop(ptr, "unknown")
        if k == "unknown":
            sys.exit(f"free of an unknown block at event {i}")
        if k is None:
            continue
        if pending_add is not None:
            add_id, operands = pending_add
            operands.append(k)
            if len(operands) == 2:
                old, new = sorted(alias.get(o, o) for o in operands)
                alias[add_id] = old
                out.append(f"f {new}")
                pending_add = None
            continue
        out.append(f"f {alias.get(k, k)}")
    out.append(f"i {iteration}")


def write_workspace(stack, size, ids, out, calls_made):
    """The cuDNN call that follows this request, when it is a convolution's output."""
    conv = next(((n, call, s) for n, call, s in stack if n in CONV_OPS), None)
    if conv is None:
        return
    name, op_call, shapes = conv
    if name == "aten::convolution":
        x, w = shapes[0], shapes[1]
        out.append(f"w {next(ids)} {conv_kind(w)} f {nbytes(x)} {size} {nbytes(w)}")
    else:
        grad_out, x, w = shapes[0], shapes[1], shapes[2]
        # cudnn_convolution_backward makes the input's gradient first, then the weight's.
        first = op_call not in calls_made
        calls_made[op_call] = True
        call = "d" if first and size == nbytes(x) else "w"
        out.append(f"w {next(ids)} {conv_kind(w)} {call} {nbytes(x)} {nbytes(grad_out)} "
                   f"{nbytes(w)}")
    # a workspace is freed when its call returns
    out.append(f"f {out[-1].split()[1]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--inplace", action="store_true",
                    help="torchvision's in-place ReLU and residual add (default: out of place)")
    args = ap.parse_args()
    weights, events = record(args.batch, args.inplace)
    out = []
    convert(weights, events, out)
    print("\n".join(out))


if __name__ == "__main__":
    main()

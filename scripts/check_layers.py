#!/usr/bin/python3
"""Fails when a source file includes a header from a layer above its own.

    scripts/check_layers.py [REPO_ROOT]
    scripts/check_layers.py --self-test    # proves the check rejects an upward include

memest's layers, lowest first: the public vocabulary (include/memest/), base (status, checked
arithmetic, dtypes, SHA-256, JSON fields, and the vocabulary's implementation: options, estimates,
GPU and stack profiles, measured rows), core (the graph: loader, name index, dims, binding), ops (the per-op rule table, shape rules, value facts), memory (the
estimation context and the pipeline every backend shares, Estimator::Run), the backends (analytical, symbolic, measurement; learned above analytical and
symbolic), api (registry: the one place that knows every backend), then the programs and data
tools (tools/, datasets/), tests and benchmarks. tools/ is checked too: programs use the public
headers, not the estimation internals. A file may include its own directory's headers
and those of the layers LAYERS lists for it; anything else is an upward (or sideways) edge and
fails the check, naming the file, the line and the header.

KNOWN_DEBT lists the edges that exist today and are still to be removed (issue 12). The list may
only shrink: an entry that no longer matches anything also fails the check, so a fix must delete
its entry.

Run by ctest (LayeringTest.NoUpwardIncludes) on every build of the tests.
"""
import pathlib
import re
import sys
import tempfile

# Directory -> the directories whose headers it may include (besides its own).
VOCAB = ["memest"]  # include/memest/ headers are written "memest/x.h"
LAYERS = {
    "base": VOCAB,
    "core": VOCAB + ["base"],
    "ops": VOCAB + ["base", "core"],
    "memory": VOCAB + ["base", "core", "ops"],
    "analytical": VOCAB + ["base", "core", "ops", "memory"],
    "symbolic": VOCAB + ["base", "core", "ops", "memory"],
    "measurement": VOCAB + ["base", "core", "ops", "memory"],
    "learned": VOCAB + ["base", "core", "ops", "memory", "analytical", "symbolic"],
    "api": VOCAB + ["base", "core", "ops", "memory", "analytical", "symbolic", "learned",
                    "measurement"],
    "datasets": VOCAB + ["base", "core", "ops", "memory", "analytical", "symbolic", "learned",
                         "api", "datasets"],
    # The programs reach the library through its public headers (memest/...); what else they
    # may include: the data generators, the trainer's and evaluator's own model (learned/), the
    # harness for memest-measure (measurement/), base's utilities (sha256, stats, JSON fields)
    # and core's graph (memest-train's device-level features read it). Never the estimation
    # internals (ops, memory, the backends' simulations): --timeline goes through
    # memest/timeline.h, serving through memest/serving.h.
    "tools": VOCAB + ["tools", "datasets", "base", "core", "learned", "measurement"],
    "tests": None,
    "bench": None,
}
# include/memest/ itself: public headers include only each other.
PUBLIC = "include/memest"

# (file, included header prefix): upward edges that exist today, each to be removed. Empty: the
# last ones (core's shape pass reaching up to ops' rules) went when the pass moved to
# ops/shape_pass.cc and LoadModel to ops/load_model.cc.
KNOWN_DEBT = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    parts = rel.split("/")
    if rel.startswith(PUBLIC + "/"):
        return PUBLIC
    return parts[0] if parts[0] in LAYERS else None


def allowed(layer, header):
    top = header.split("/")[0]
    if layer == PUBLIC:
        return top == "memest"
    deps = LAYERS[layer]
    if deps is None:
        return True
    return top == layer or top in deps or "/" not in header  # "x.h": a file next to it


def problems(root):
    """Every upward edge under root (and every stale KNOWN_DEBT entry), as messages."""
    errors, used_debt = [], set()
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cc", ".cpp") or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("build", ".git/")) or "/generated/" in rel:
            continue
        layer = layer_of(rel)
        if layer is None:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or allowed(layer, m.group(1)):
                continue
            if (rel, m.group(1)) in KNOWN_DEBT:
                used_debt.add((rel, m.group(1)))
                continue
            errors.append(f"{rel}:{n}: layer '{layer}' includes \"{m.group(1)}\" from a layer "
                          f"above or beside it")
    for rel, header in sorted(KNOWN_DEBT - used_debt):
        errors.append(f"scripts/check_layers.py: KNOWN_DEBT entry ({rel}, {header}) no longer "
                      f"occurs: delete it")
    return errors, used_debt


def self_test():
    """A tree with one downward and one upward include: exactly the upward one is reported."""
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for rel, text in {
            "ops/shape_pass.cc": '#include "ops/rules.h"\n#include "core/symbolic_shapes.h"\n',
            "ops/rules.cc": '#include "core/graph.h"\n#include "memest/status.h"\n',
            "core/bad.cc": '#include "core/graph.h"\n#include "symbolic/timeline.h"\n',
            "base/bad.cc": '#include "base/checked.h"\n#include "core/graph.h"\n',
            "include/memest/x.h": '#include "core/graph.h"\n',
        }.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        errors, _ = problems(root)
        expected = ["base/bad.cc:2:", "core/bad.cc:2:", "include/memest/x.h:1:"]
        got = [e.split(" ")[0] for e in errors]
        if got != expected:
            print(f"self-test FAILED: expected {expected}, got {errors}")
            return 1
    print("self-test: upward includes rejected, downward ones accepted")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors, used_debt = problems(root)
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} problem(s); {len(used_debt)} known upward edge(s) left")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

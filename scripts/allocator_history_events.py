#!/usr/bin/env python3
"""A PyTorch caching-allocator history as a plain event list, for replay through memest's model.

    scripts/allocator_history_events.py SNAPSHOT.pickle.gz > EVENTS.txt

SNAPSHOT is what torch.cuda.memory._snapshot() returned after
torch.cuda.memory._record_memory_history() (scripts/gpu_device_truth.py --lm-trace writes it,
gzipped). Only a pickle from this repository may be loaded: unpickling runs code.

Output, one event per line (tests/unit/allocator_history_test.cc replays it):
  a ID BYTES   a block of BYTES handed out (the allocator's block size, already rounded)
  f ID         that block freed (free_completed; one stream, so it is reusable at once)
  b            the history begins: the blocks above were alive before it (the model's weights
               and what earlier code left), allocated here in address order
The blocks alive before the history are those it frees without having allocated them, and those
alive at the snapshot that it never allocated. Segment events are not written: the replay decides
its own segments, which is what it checks.
"""
import gzip
import pickle
import sys


def main():
    with gzip.open(sys.argv[1], "rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][0]
    if any(e["stream"] != trace[0]["stream"] for e in trace):
        sys.exit("more than one stream: the replay models one")
    live, before = {}, []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            if e["addr"] in live:
                del live[e["addr"]]
            else:
                before.append((e["addr"], e["size"]))
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and block["address"] not in live:
                before.append((block["address"], block["size"]))
    out, ids, next_id = [], {}, 0
    for addr, size in sorted(set(before)):
        next_id += 1
        ids[addr] = next_id
        out.append(f"a {next_id} {size}")
    out.append("b")
    for e in trace:
        if e["action"] == "alloc":
            next_id += 1
            ids[e["addr"]] = next_id
            out.append(f"a {next_id} {e['size']}")
        elif e["action"] == "free_completed" and e["addr"] in ids:
            out.append(f"f {ids.pop(e['addr'])}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

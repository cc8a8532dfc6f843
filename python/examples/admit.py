"""A scheduler's admission check with memest (docs/embedding.md).

    python3 admit.py MODEL.onnx GPU BATCH   # exit 0 admit, 1 refuse (prints a batch that fits), 2 error
"""
import sys

import memest

MARGIN = {"margin_fraction": 0.05}  # keep 5 % of the GPU free


def admit(onnx_path: str, gpu: str, batch: int, backend: str = "symbolic") -> tuple:
    """(True, None) when the job fits `gpu` at `batch`; else (False, the largest batch that fits)."""
    model = memest.load(onnx_path)
    estimate = memest.estimate(model, backend, batch=batch, gpu=gpu, fit=MARGIN)
    if estimate.fit.fits:
        return True, None
    largest, _ = memest.max_batch(model, backend, gpu=gpu, fit=MARGIN)
    return False, largest


def main(argv: list) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        ok, largest = admit(argv[1], argv[2], int(argv[3]))
    except (memest.Error, ValueError) as e:
        print(f"memest: {e}", file=sys.stderr)
        return 2
    if ok:
        print("admit")
        return 0
    print(f"refuse: batch {largest} would fit")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

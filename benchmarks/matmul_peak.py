"""The machine's own large-matmul rate: the ceiling a training step's GFLOP/s is measured against.

    .venv/bin/python benchmarks/matmul_peak.py                 # fp32 and bf16, one JSON line
    .venv/bin/python benchmarks/matmul_peak.py --precision fp32

tf.matmul of two [2048, 2048] matrices in a tf.function (the product TensorFlow's oneDNN
runs fastest on a CPU: large, square, contiguous), warmed up, then the median of repeated
calls, each forced to finish; 2 n^3 FLOPs a product. bf16 multiplies bfloat16 inputs (on a
CPU without bf16 units TensorFlow converts them, and the rate says so). `train_throughput.py`
measures the same in its own run and reports its achieved rate as a fraction of it (issue 40).
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZE = 2048
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def matmul_gflop_s(precision: str, size: int = SIZE, calls: int = 20, seconds: float = 3.0) -> float:
    """The median rate of `calls` products (fewer if they take over `seconds`), after 3 warm-up calls."""
    import tensorflow as tf

    dtype = DTYPES[precision]
    a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)
    product = tf.function(lambda x, y: tf.matmul(x, y), autograph=False)
    for _ in range(3):
        product(a, b)[0, 0].numpy()
    times, started = [], time.perf_counter()
    while len(times) < calls and (len(times) < 5 or time.perf_counter() - started < seconds):
        t0 = time.perf_counter()
        product(a, b)[0, 0].numpy()  # forces the product to finish
        times.append(time.perf_counter() - t0)
    return 2 * size**3 / statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", choices=[*DTYPES, "both"], default="both")
    args = parser.parse_args()
    from machine import cpu_model

    import tensorflow as tf

    precisions = list(DTYPES) if args.precision == "both" else [args.precision]
    result = {"bench": "matmul_peak", "size": SIZE, "cpu": cpu_model(), "threads": os.cpu_count(),
              "framework": f"tensorflow {tf.__version__}"}
    for precision in precisions:
        result[f"{precision}_gflop_s"] = round(matmul_gflop_s(precision), 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

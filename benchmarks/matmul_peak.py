"""The machine's own large-matmul rate: the ceiling a training step's GFLOP/s is measured against.

    .venv/bin/python benchmarks/matmul_peak.py                 # fp32 and bf16, one JSON line
    .venv/bin/python benchmarks/matmul_peak.py --precision fp32

tf.matmul of two [2048, 2048] matrices in a tf.function (the product TensorFlow's oneDNN
runs fastest on a CPU: large, square, contiguous), warmed up, then the best of 3 rounds of 6
products; 2 n^3 FLOPs a product. bf16 multiplies bfloat16 inputs (on a
CPU without bf16 units TensorFlow converts them, and the rate says so). `train_throughput.py`
measures the same in its own run and reports its achieved rate as a fraction of it (issue 40).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZE = 2048
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def matmul_gflop_s(precision: str, size: int = SIZE, rounds: int = 3, products: int = 6) -> float:
    """The best round's rate: `rounds` rounds of `products` back-to-back products, each round
    forced to finish, after a warm-up call. A ceiling (best, not median), measured as
    the peers' matmul ceilings are, so a step's fraction of it is not flattered by a slow round."""
    import tensorflow as tf

    dtype = DTYPES[precision]
    a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)
    product = tf.function(lambda x, y: tf.matmul(x, y), autograph=False)
    product(a, b)[0, 0].numpy()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(products):
            result = product(a, b)
        result[0, 0].numpy()  # forces the round to finish
        best = min(best, (time.perf_counter() - started) / products)
    return 2 * size**3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", choices=[*DTYPES, "both"], default="both")
    args = parser.parse_args()
    from t2t_keras.system import cpu_model

    import tensorflow as tf

    precisions = list(DTYPES) if args.precision == "both" else [args.precision]
    result = {"bench": "matmul_peak", "size": SIZE, "cpu": cpu_model(), "threads": os.cpu_count(),
              "framework": f"tensorflow {tf.__version__}"}
    for precision in precisions:
        result[f"{precision}_gflop_s"] = round(matmul_gflop_s(precision), 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

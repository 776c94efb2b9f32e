"""Ways to lay out a shortlist's output columns in a decoding step, timed alone (issue 73, item 2).

    .venv/bin/python benchmarks/shortlist_columns.py --precision bf16 --union 4320 --own 1344 --group 8 --group_columns 2208

One batch part's vocabulary-wide work per step, as one decoding thread runs it: the output
product, the per-sentence mask, the blocked top-k and the normaliser (`top_k_rows`,
`log_normalizers_at`), for `--sentences` sentences x `--beam` hypotheses at d_model `--d_model`:

- `union`: one [rows, d] x [d, U] product over the union of the part's lists (today's search);
- `own`: each sentence's own rows [S, W, d] (W its part's longest list) in a batched product
  [S, beam, d] x [S, d, W];
- `group`: groups of `--group` sentences, each with its own union [G, Wg, d].

Column counts come from the caller (decoding/shortlist.py's lists on the demo model and the
val set gave, at shortlist=50: own lists of 1146 tokens on average, the longest of a part of
64 ~1344, the part's union ~4320, a group of 8's union ~2187). Random weights; the best of 7
rounds of 20 chained steps; one JSON line of milliseconds per step.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--union", type=int, default=4320)
    parser.add_argument("--own", type=int, default=1344)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--group_columns", type=int, default=2208)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    from t2t_keras import system

    system.keep_kernels_for_every_shape()
    system.one_thread_per_op(1)
    import tensorflow as tf

    from t2t_keras.kernels.softmax import log_normalizers_at
    from t2t_keras.kernels.top_k import top_k_rows

    S, K, d, G = args.sentences, args.beam, args.d_model, args.group
    dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[args.precision]
    normal = lambda shape, seed: tf.random.stateless_normal(shape, seed=(1, seed), dtype=dtype)
    keep = lambda shape, seed, share: tf.random.stateless_uniform(shape, seed=(2, seed)) < share
    states = normal([S * K, d], 1)
    union, union_mask = normal([args.union, d], 2), keep([S, args.union], 3, 0.25)
    own, own_mask = normal([S, args.own, d], 4), keep([S, args.own], 5, 0.9)
    grouped, group_mask = normal([S // G, args.group_columns, d], 6), keep([S, args.group_columns], 7, 0.5)

    def chosen(logits, mask):  # the search's vocabulary-wide work after the product
        logits = tf.cast(logits, tf.float32)
        logits = tf.reshape(tf.where(mask[:, None, :], tf.reshape(logits, [S, K, -1]), -1e9), [S * K, -1])
        values, indices = top_k_rows(logits, 2 * K)
        normalizers, _ = log_normalizers_at(logits, indices[:, 0])
        return values - normalizers[:, None]

    layouts = {
        "union": lambda x: chosen(tf.matmul(x, union, transpose_b=True), union_mask),
        "own": lambda x: chosen(tf.reshape(tf.matmul(tf.reshape(x, [S, K, d]), own, transpose_b=True), [S * K, -1]), own_mask),
        "group": lambda x: chosen(tf.reshape(tf.matmul(tf.reshape(x, [S // G, G * K, d]), grouped, transpose_b=True),
                                             [S * K, -1]), group_mask),
    }

    def chained(layout):
        @tf.function(autograph=False)
        def run(x):
            for _ in range(args.steps):  # each step's input depends on the last one's output
                x = x + tf.cast(layout(x)[:, :1] * 1e-6, x.dtype)
            return x

        return run

    runs = {name: chained(layout) for name, layout in layouts.items()}
    best = {}
    for _ in range(8):  # the first round traces and warms up
        for name, run in runs.items():
            started = time.perf_counter()
            run(states).numpy()
            best.setdefault(name, []).append(time.perf_counter() - started)
    print(json.dumps({"bench": "shortlist_columns", **vars(args), "cpu": system.cpu_model(),
                      **{f"{name}_ms_per_step": round(min(times[1:]) / args.steps * 1e3, 3) for name, times in best.items()}}))


if __name__ == "__main__":
    main()

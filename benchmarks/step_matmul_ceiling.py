"""The fraction of the large-matmul rate a training step could reach if only its matrix
products took time: each product of the step, at its own shape and orientation, timed alone.

    .venv/bin/python benchmarks/step_matmul_ceiling.py --size tiny

`train_throughput.py` reports a step's achieved GFLOP/s as a fraction of `matmul_peak.py`'s
[2048, 2048]^2 rate (issue 40). Part of the gap is not the step's doing: oneDNN multiplies a
[2048, 256] x [256, 256] product slower than a square one. This lists every product the FLOP
formula counts (per layer: the attention projections, the feed-forward pair, the batched
attention products; the output projection), forward (x @ W), input gradient (dy @ W^T) and
weight gradient (x^T @ dy) as autodiff runs them, times each distinct one (best of 3 windows
of >= 0.3 s), and prints one JSON line:

- `ceiling_fraction`: sum of FLOPs / sum of (FLOPs / the product's rate), over the square
  rate: the most a step built on these kernels could reach with everything else free;
- `ceiling_fraction_nn`: the same with each product at the best of its own orientation, the
  plain one (a @ b) and its transpose (b^T @ a^T): what transposed copies and the choice of
  layout could buy, the copies' cost not counted;
- `slowest`: the products that take most of that time, with their rates; `largest_gains`: those
  whose best orientation would save most of it.
"""

import argparse
import collections
import json
import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import shapes  # noqa: E402  (the protocol every engine is measured with)
from matmul_peak import matmul_gflop_s  # noqa: E402

# (batch, m, k, n, transpose_a, transpose_b): tf.matmul of a [batch, m, k] (or [batch, k, m]
# with transpose_a) by a [batch, k, n] (or [batch, n, k] with transpose_b); batch 0 = 2-D.
Product = collections.namedtuple("Product", "batch m k n transpose_a transpose_b")


def with_gradients(batch, m, k, n):
    """A product y = a @ b [m, k] x [k, n] and the two autodiff runs for its gradients:
    da = dy @ b^T ([m, n] x [n, k]) and db = a^T @ dy ([k, m] x [m, n])."""
    return [Product(batch, m, k, n, False, False), Product(batch, m, n, k, False, True),
            Product(batch, k, m, n, True, False)]


def step_products(shape):
    """Every product of one training step, with how many times it runs."""
    batch, src, tgt, d, f, heads = shape.batch, shape.src_len, shape.tgt_len, shape.d_model, shape.d_ff, shape.num_heads
    src_tokens, tgt_tokens, depth, pairs = batch * src, batch * tgt, d // heads, batch * heads
    dense = ([(src_tokens, d, d)] * 4 + [(src_tokens, d, f), (src_tokens, f, d)]  # encoder layer
             + [(tgt_tokens, d, d)] * 6 + [(src_tokens, d, d)] * 2  # decoder self-attention, cross Q/O, cross K/V
             + [(tgt_tokens, d, f), (tgt_tokens, f, d)])
    attention = [(src, depth, src), (src, src, depth), (tgt, depth, tgt), (tgt, tgt, depth), (tgt, depth, src), (tgt, src, depth)]
    counts = collections.Counter()
    for m, k, n in dense:
        counts.update({product: shape.num_layers for product in with_gradients(0, m, k, n)})
    for m, k, n in attention:
        counts.update({product: shape.num_layers for product in with_gradients(pairs, m, k, n)})
    counts.update(with_gradients(0, tgt_tokens, d, shape.vocab))  # output projection
    return counts


def name(product):
    """'[m,k]x[k,n]' with the batch ('64x...') and the operands stored transposed ('ta', 'tb')."""
    return (f"{'%dx' % product.batch if product.batch else ''}[{product.m},{product.k}]x[{product.k},{product.n}]"
            f"{' ta' if product.transpose_a else ''}{' tb' if product.transpose_b else ''}")


def flops(product):
    return 2 * max(product.batch, 1) * product.m * product.k * product.n


def gflop_s(product, dtype):
    """The best of 3 windows of back-to-back runs (each window >= 0.3 s, the last result read)."""
    import tensorflow as tf

    lead = [product.batch] if product.batch else []
    a_shape = [product.k, product.m] if product.transpose_a else [product.m, product.k]
    b_shape = [product.n, product.k] if product.transpose_b else [product.k, product.n]
    a = tf.cast(tf.random.stateless_normal(lead + a_shape, seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal(lead + b_shape, seed=[3, 4]), dtype)
    run = tf.function(lambda x, y: tf.matmul(x, y, transpose_a=product.transpose_a, transpose_b=product.transpose_b)[..., :1, :1],
                      autograph=False)
    run(a, b).numpy()
    best = 0.0
    for _ in range(3):
        count, started = 0, time.perf_counter()
        while count < 3 or time.perf_counter() - started < 0.3:
            result = run(a, b)
            count += 1
        result.numpy()
        best = max(best, flops(product) * count / (time.perf_counter() - started) / 1e9)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=list(shapes.SHAPES), default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    from t2t_keras.system import cpu_model

    import tensorflow as tf

    shape = shapes.SHAPES[args.size]
    dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[args.precision]
    counts = step_products(shape)
    rates = {product: gflop_s(product, dtype) for product in counts}
    for product in counts:  # the same matrix or its transpose by a plain product: a @ b, or b^T @ a^T
        for plain in (product._replace(transpose_a=False, transpose_b=False), Product(product.batch, product.n, product.k, product.m, False, False)):
            if plain not in rates:
                rates[plain] = gflop_s(plain, dtype)
    best = {p: max(rates[p], rates[p._replace(transpose_a=False, transpose_b=False)], rates[Product(p.batch, p.n, p.k, p.m, False, False)])
            for p in counts}
    peak = matmul_gflop_s(args.precision)
    total = sum(flops(p) * c for p, c in counts.items())
    seconds = {p: flops(p) * c / rates[p] / 1e9 for p, c in counts.items()}
    seconds_nn = sum(flops(p) * c / best[p] / 1e9 for p, c in counts.items())
    formula = shapes.flops_per_step(shape)["flops_per_step"]
    slowest = sorted(seconds, key=seconds.get, reverse=True)[:5]
    saved = {p: seconds[p] - flops(p) * c / best[p] / 1e9 for p, c in counts.items()}
    winner = {p: max([("own", rates[p]), ("a @ b", rates[p._replace(transpose_a=False, transpose_b=False)]),
                      ("b^T @ a^T", rates[Product(p.batch, p.n, p.k, p.m, False, False)])], key=lambda pair: pair[1])[0]
              for p in counts}
    print(json.dumps({
        "bench": "step_matmul_ceiling", "size": args.size, "precision": args.precision, "cpu": cpu_model(),
        "framework": f"tensorflow {tf.__version__}",
        "step_matmul_gflop": round(total / 1e9, 2), "formula_gflop": round(formula / 1e9, 2),
        "matmul_seconds": round(sum(seconds.values()), 4), "ceiling_gflop_s": round(total / sum(seconds.values()) / 1e9, 1),
        "matmul_peak_gflop_s": round(peak, 1),
        "ceiling_fraction": round(total / sum(seconds.values()) / 1e9 / peak, 3),
        "ceiling_fraction_nn": round(total / seconds_nn / 1e9 / peak, 3),
        "slowest": [{"product": name(p), "gflop_s": round(rates[p], 1), "share": round(seconds[p] / sum(seconds.values()), 3)} for p in slowest],
        "largest_gains": [{"product": name(p), "gflop_s": round(rates[p], 1), "best": winner[p], "best_gflop_s": round(best[p], 1),
                           "share_saved": round(saved[p] / sum(seconds.values()), 3)}
                          for p in sorted(saved, key=saved.get, reverse=True)[:5]],
        "seconds": round(time.perf_counter() - T0, 1),
    }), flush=True)


if __name__ == "__main__":
    main()

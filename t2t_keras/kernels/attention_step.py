"""A decoding step's attention in one native kernel (kernels/native/attention_step.cc): the few
queries of each row (a hypothesis's one, or a sentence's beams) over its cached keys and values,
softmax(Q K^T + bias) V with the heads moved behind the queries, where the graph runs two
batched products, a softmax and a transpose whose every new shape costs oneDNN a new kernel.

    context = attention_step(queries, keys, values, key_bias)   # [B, h, Q, d] ... -> [B, Q, h, dv]
"""

import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.timing import best_milliseconds

MASKED_LOGIT = -1.0e9  # what a masked key's logit gets (layers/attention.py's)


def attention_step(queries, keys, values, key_bias=None):
    """Context [B, Q, h, dv] of queries [B, h, Q, d] (scaled by d^-0.5 already) over keys
    [B, h, L, d] and values [B, h, L, dv] in their dtype (float32 or bfloat16), `key_bias`
    [B, L] float32 added to the logits (None: every key). Needs `native.library()`."""
    if key_bias is None:
        key_bias = tf.zeros([0, 0], tf.float32)
    return native.library().t2t_attention_step(queries, keys, values, key_bias)


def graph_attention_step(queries, keys, values, key_bias=None):
    """The same by TensorFlow's ops, as layers/attention.py computes it: the reference and the
    alternative the decode kernel choice `attention` times against the native kernel."""
    logits = tf.cast(tf.matmul(queries, keys, transpose_b=True), tf.float32)
    if key_bias is not None:
        logits = logits + key_bias[:, None, None, :]
    weights = tf.cast(tf.nn.softmax(logits, axis=-1), queries.dtype)
    return tf.transpose(tf.matmul(weights, values), (0, 2, 1, 3))


def implementation_timings(rows: int, heads: int, depth: int, length: int, dtype=tf.float32, rounds: int = 3) -> dict:
    """{implementation: ms} of 8 steps' self-attention one after another, each of `rows` rows
    with `length` cached positions (one query each), in `dtype`, on this machine
    (`timing.best_milliseconds`); "native" only where it loaded. What the decode kernel choice
    `attention` picks from (decoding/kernel_choices.py)."""
    shape = [rows, heads, length, depth]
    keys = tf.random.stateless_normal(shape, seed=(9, 10), dtype=dtype)
    values = tf.random.stateless_normal(shape, seed=(11, 12), dtype=dtype)
    queries = tf.random.stateless_normal([rows, heads, 1, depth], seed=(13, 14), dtype=dtype)

    def chained(attend):
        @tf.function(autograph=False)
        def run():
            q = queries
            for _ in range(8):
                context = attend(q, keys, values)
                q = tf.reshape(context, [rows, heads, 1, depth]) * tf.constant(0.5, dtype)
            return q

        return lambda: run().numpy()

    runs = {"graph": chained(graph_attention_step)}
    if native.library() is not None:
        runs["native"] = chained(attention_step)
    return best_milliseconds(runs, rounds)

"""max(0, x + bias), the FFN's inner activation, as one native kernel each way
(`kernels/native/bias_relu.cc`), and its timing against the graph's ops."""

import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.timing import chained_forward_backward_ms

IMPLEMENTATIONS = native.IMPLEMENTATIONS


def native_bias_relu(x, bias):
    """max(0, x + bias) over the last axis of float32 or bfloat16 x (bias float32, rounded to x's
    dtype first, as the graph's cast of it): one pass forward; the backward, ReLU's mask and the
    bias' gradient (summed in float32) in one pass, from the output alone. Equal to the graph's
    forward; the gradients to float rounding. Only where `native.library()` loaded."""
    ops = native.library()

    @tf.custom_gradient
    def rectify(x, bias):
        outputs = ops.t2t_bias_relu(x, bias)
        return outputs, lambda upstream: ops.t2t_bias_relu_grad(upstream, outputs)

    return rectify(x, bias)


def implementation_timings(rows: int, depth: int, dtype=tf.float32, rounds: int = 3) -> dict:
    """{implementation: ms} of 10 chained forward + backward passes over [rows, depth] x in
    `dtype` (the graph's as `layers.Dense` runs it: the bias cast to x's dtype, add, ReLU), on this
    machine (`timing.chained_forward_backward_ms`); "native" only where it loaded. A fraction of a second."""
    x = tf.random.stateless_normal([rows, depth], seed=(1, 2), dtype=dtype)
    bias = tf.random.stateless_normal([depth], seed=(3, 4))
    functions = {"graph": lambda x, bias: tf.nn.relu(x + tf.cast(bias, x.dtype))}
    if native.library() is not None:
        functions["native"] = native_bias_relu

    return chained_forward_backward_ms(functions, x, [bias], rounds)

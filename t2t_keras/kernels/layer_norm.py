"""Layer normalisation over the last axis with its gradient written out: in TensorFlow ops, or
as one native kernel each way (`kernels/native/layer_norm.cc`)."""

import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.dropout import keep_scale
from t2t_keras.kernels.timing import chained_forward_backward_ms

IMPLEMENTATIONS = native.IMPLEMENTATIONS


def layer_norm(x, gamma, beta, epsilon: float, hand_written_gradient: bool = True):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over the last axis of float32 x.

    Without `hand_written_gradient` (inference) the same ops, differentiated by autodiff: the
    graph then holds no custom-gradient op, which a SavedModel would warn about at every load.
    """

    def normalized_of(x):
        centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
        return centered * inverse_std, inverse_std

    if not hand_written_gradient:
        return normalized_of(x)[0] * gamma + beta

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        normalized, inverse_std = normalized_of(x)

        def gradient(upstream):
            # d/dx of the normalisation: (g - mean(g) - x^ * mean(g * x^)) / std, g = dy * gamma.
            scaled = upstream * gamma
            dx = inverse_std * (
                scaled
                - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                - normalized * tf.reduce_mean(scaled * normalized, axis=-1, keepdims=True)
            )
            rows = tf.range(tf.rank(x) - 1)
            return dx, tf.reduce_sum(upstream * normalized, axis=rows), tf.reduce_sum(upstream, axis=rows)

        return normalized * gamma + beta, gradient

    return normalize(x, gamma, beta)


def native_layer_norm(x, gamma, beta, epsilon: float):
    """`layer_norm` of float32 or bfloat16 x (float32 arithmetic, the output in x's dtype, as
    `layer_norm` of x cast up and its result cast back) by the native kernels: one pass over x
    forward, one backward, where the graph takes about ten elementwise ops and two casts each
    way. Its backward keeps x and two floats a row, not the normalised [..., d] float32 tensor.
    Only where `native.library()` loaded."""
    ops = native.library()

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        outputs, mean, inverse_std = ops.t2t_layer_norm(x, gamma, beta, epsilon=epsilon)
        return outputs, lambda upstream: ops.t2t_layer_norm_grad(upstream, x, gamma, mean, inverse_std)

    return normalize(x, gamma, beta)


def native_dropout_add_layer_norm(x, h, bits, threshold: int, gamma, beta, epsilon: float):
    """`native_layer_norm(x + dropout(h))` as one native kernel each way (post-norm's residual
    connection), h's units dropped where their uint16 `bits` < `threshold` (`kernels/dropout.py`)
    and the rest scaled by `keep_scale(threshold)`, each step rounded to x's dtype as the graph's
    dropout and add round it. The sum is never written: the backward recomputes it from x, h and
    the bits. Only where `native.library()` loaded."""
    ops = native.library()
    mask = dict(threshold=int(threshold), scale=keep_scale(threshold))

    @tf.custom_gradient
    def normalize(x, h, gamma, beta):
        outputs, mean, inverse_std = ops.t2t_dropout_add_layer_norm(x, h, bits, gamma, beta, epsilon=epsilon, **mask)

        def gradient(upstream):
            return ops.t2t_dropout_add_layer_norm_grad(upstream, x, h, bits, gamma, mean, inverse_std, **mask)

        return outputs, gradient

    return normalize(x, h, gamma, beta)


def implementation_timings(rows: int, depth: int, dtype=tf.float32, rounds: int = 3) -> dict:
    """{implementation: ms} of 10 chained forward + backward passes over [rows, depth] x in
    `dtype` (as the layer runs them: the graph one on x cast to float32 and back), on this
    machine (`timing.chained_forward_backward_ms`); "native" only where it loaded. A fraction of a second."""
    x = tf.random.stateless_normal([rows, depth], seed=(1, 2), dtype=dtype)
    gamma = tf.random.stateless_normal([depth], seed=(3, 4))
    beta = tf.random.stateless_normal([depth], seed=(5, 6))
    functions = {"graph": lambda x, gamma, beta: tf.cast(layer_norm(tf.cast(x, tf.float32), gamma, beta, 1e-6), x.dtype)}
    if native.library() is not None:
        functions["native"] = lambda x, gamma, beta: native_layer_norm(x, gamma, beta, 1e-6)

    return chained_forward_backward_ms(functions, x, [gamma, beta], rounds)

"""Layer normalisation over the last axis with its gradient written out."""

import tensorflow as tf


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

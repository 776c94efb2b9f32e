"""Layer normalisation over the last axis with its gradient written out."""

import tensorflow as tf


def layer_norm(x, gamma, beta, epsilon: float):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over the last axis of float32 x."""

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
        normalized = centered * inverse_std

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

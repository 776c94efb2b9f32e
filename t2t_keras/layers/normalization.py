"""Layer normalisation over the last axis with its gradient written out."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="t2t_keras")
class LayerNorm(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis (same weights, config and
    checkpoints), computed in float32 by `layer_norm`: forward and backward in about half
    the TensorFlow ops that differentiating Keras's formula takes (EXPERIMENTS.md,
    "Hand-written kernels"). Any other axis, rms_scaling
    or a missing gamma or beta falls back to Keras's computation."""

    def call(self, inputs):
        if self.axis not in (-1, [-1], [len(inputs.shape) - 1]) or self.rms_scaling or not (self.center and self.scale):
            return super().call(inputs)
        outputs = layer_norm(tf.cast(inputs, tf.float32), tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32),
                             self.epsilon)
        return tf.cast(outputs, self.compute_dtype)


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

"""Dropout that keeps its mask for the backward pass."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout with the same masks (same seed stream, same uniform draws, kept
    where u >= rate, scaled by 1 / (1 - rate)), built as one mask tensor that the forward
    and backward passes each multiply by once: TensorFlow's stateless_dropout scales, compares,
    casts and multiplies (30 dropouts of [1024, 512] forward and backward: 35 vs 44 ms on a
    2-core CPU). A noise_shape falls back to Keras's computation."""

    def call(self, inputs, training=False):
        if not training or self.rate <= 0 or self.rate >= 1 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # as Keras casts it
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        uniform = tf.random.stateless_uniform(tf.shape(inputs), seed=seed, dtype=inputs.dtype)
        mask = tf.where(uniform >= self.rate, tf.constant(1.0 / (1.0 - self.rate), inputs.dtype), tf.zeros([], inputs.dtype))
        return _masked(inputs, mask)


@tf.custom_gradient
def _masked(inputs, mask):
    """inputs * mask, differentiated with respect to inputs only."""
    return inputs * mask, lambda upstream: (upstream * mask, None)

"""Dropout from 16 random bits a unit (`kernels.dropout`), its mask kept for the backward pass."""

import keras
import tensorflow as tf

from t2t_keras.kernels.dropout import LEVELS, keep_scale, masked, random_uint16


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout (same config, seed stream and rate) drawing half the random numbers.

    Each unit is dropped independently with probability `rate`, and kept units are scaled so
    that the expected output equals the input, as Keras does; but where Keras draws a float32
    uniform (one Philox output, 32 bits) a unit, this draws 16 bits a unit: one Philox uint32
    serves two units. Philox is most of dropout's cost on a CPU
    (docs/results/training_speed.md, "Hand-written kernels"), and the mask is one tensor
    multiplied once each way.

    The rate is applied as round(rate * 2^16) / 2^16, within 2^-17 (7.6e-6) of `rate`, and the
    kept units are scaled by the inverse of that exact keep probability, so E[output] = input
    still holds exactly. A rate that 16 bits do not express to within 0.1% (only rates below
    0.008 can miss) and a noise_shape take Keras's computation.
    """

    def call(self, inputs, training=False):
        drawn = self.random_bits(inputs, training)
        if drawn is None:
            return super().call(inputs, training=training)
        bits, threshold = drawn
        mask = tf.where(bits >= tf.constant(threshold, tf.uint16), tf.constant(keep_scale(threshold), inputs.dtype),
                        tf.zeros([], inputs.dtype))
        return masked(inputs, mask)

    def random_bits(self, inputs, training):
        """(bits, threshold) of this call's mask: 16 random bits a unit of `inputs` (uint16) and
        the level below which a unit is dropped; None where Keras's computation runs instead (not
        training, a noise_shape, a rate 16 bits do not express). Draws from the seed stream as
        `call` does, so a kernel that applies the mask itself drops the same units."""
        threshold = round(self.rate * LEVELS)
        exact_enough = 0 < threshold < LEVELS and abs(threshold / LEVELS - self.rate) <= 1e-3 * self.rate
        if not training or not exact_enough or self.noise_shape is not None:
            return None
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # as Keras casts it
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        return random_uint16(tf.shape(inputs), seed), threshold

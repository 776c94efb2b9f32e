"""The pieces of a cheaper dropout: 16 random bits a unit, and a mask applied once each way."""

import tensorflow as tf

LEVELS = 1 << 16  # a unit is dropped when its 16 random bits fall below round(rate * 2^16)


def keep_scale(threshold: int) -> float:
    """The scale of kept units, 1 / P(keep), for units dropped below `threshold` of LEVELS."""
    return LEVELS / (LEVELS - threshold)


def random_uint16(shape, seed):
    """Uniform uint16 values of `shape` from ceil(size / 2) Philox uint32 draws (stateless)."""
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])
    return tf.reshape(halves[:size], shape)


@tf.custom_gradient
def masked(inputs, mask):
    """inputs * mask, differentiated with respect to inputs only."""
    return inputs * mask, lambda upstream: (upstream * mask, None)

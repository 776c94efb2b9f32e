"""Dropout from 16 random bits a unit: Bernoulli(1 - rate) masks, unbiased, kept for the backward pass."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers.dropout import Dropout


def _mask_and_gradient(layer, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cast(tf.range(x.shape[-1]) + 1, tf.float32))
    gradient = tape.gradient(loss, x) / tf.cast(tf.range(x.shape[-1]) + 1, x.dtype)
    return (tf.cast(y / x, tf.float32)).numpy(), tf.cast(gradient, tf.float32).numpy()


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_each_unit_is_dropped_with_probability_rate_and_the_output_is_unbiased(rate):
    """Over 2^22 units the dropped fraction is rate to within 5 standard deviations (about
    3e-4: a wrong threshold or a biased bit would show), kept units are scaled by the inverse of
    the keep probability, and the gradient passes through the kept units alone, scaled alike."""
    x = tf.fill([1024, 4096], 1.5)
    mask, gradient = _mask_and_gradient(Dropout(rate, seed=3), x)
    dropped = float(np.mean(mask == 0))
    assert abs(dropped - rate) < 5 * np.sqrt(rate * (1 - rate) / mask.size)
    threshold = round(rate * 65536)
    np.testing.assert_allclose(np.unique(mask), [0.0, 65536 / (65536 - threshold)], rtol=1e-6)
    assert abs(float(np.mean(mask)) - 1.0) < 5 * np.sqrt(rate / (1 - rate) / mask.size)
    np.testing.assert_allclose(gradient, mask, rtol=1e-6)


def test_neighbouring_units_are_independent_and_every_call_draws_a_new_mask():
    """Two units share one 32-bit Philox draw: their masks must still be uncorrelated; a second
    call (the seed stream advances) draws a new mask, and layers seeded alike draw alike."""
    x = tf.ones([512, 2048])
    layer, twin = Dropout(0.5, seed=11), Dropout(0.5, seed=11)
    first, _ = _mask_and_gradient(layer, x)
    second, _ = _mask_and_gradient(layer, x)
    kept = (first != 0).reshape(-1).astype(np.float64)
    limit = 5 / np.sqrt(kept.size / 2)
    assert abs(np.corrcoef(kept[0::2], kept[1::2])[0, 1]) < limit  # halves of one draw
    assert abs(np.corrcoef(kept[1:-1:2], kept[2::2])[0, 1]) < limit  # across draws
    assert abs(np.corrcoef(kept, (second != 0).reshape(-1))[0, 1]) < limit
    np.testing.assert_array_equal(_mask_and_gradient(twin, x)[0], first)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_odd_sizes_and_mixed_precision(policy):
    layer = Dropout(0.2, seed=5, dtype=policy)
    x = tf.cast(tf.random.stateless_uniform([3, 5, 7], seed=[1, 2], minval=1.0, maxval=2.0), layer.compute_dtype)
    y = layer(x, training=True)
    assert y.shape == x.shape and y.dtype == x.dtype
    kept = tf.cast(y, tf.float32) != 0
    scale = tf.cast(65536 / (65536 - 13107), layer.compute_dtype)
    np.testing.assert_array_equal(tf.boolean_mask(y, kept), tf.boolean_mask(x * scale, kept))
    assert 0 < int(tf.reduce_sum(tf.cast(kept, tf.int32))) < 105
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_a_rate_16_bits_cannot_express_takes_keras_computation():
    """0.001 would be 66 / 2^16 (0.7% off): Keras's masks, exactly."""
    ours, theirs = Dropout(0.001, seed=7), keras.layers.Dropout(0.001, seed=7)
    x = tf.random.stateless_normal([64, 512], seed=[1, 2])
    np.testing.assert_array_equal(ours(x, training=True), theirs(x, training=True))

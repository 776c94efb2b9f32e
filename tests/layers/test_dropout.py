"""Dropout: Keras's masks, kept for the backward pass."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers.dropout import Dropout


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_same_outputs_and_gradients_as_keras_dropout(policy):
    """Seeded alike, ours and keras.layers.Dropout drop the same units on successive calls,
    scale the kept ones alike and pass gradients only through them."""
    ours, theirs = Dropout(0.3, seed=7, dtype=policy), keras.layers.Dropout(0.3, seed=7, dtype=policy)
    x = tf.cast(tf.random.stateless_normal([4, 6, 64], seed=[1, 2]), ours.compute_dtype)
    for _ in range(2):  # the seed stream advances alike
        results = []
        for layer in (ours, theirs):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.range(64, dtype=tf.float32))
            results.append((y, tape.gradient(loss, x)))
        (y, gradient), (expected_y, expected_gradient) = results
        np.testing.assert_array_equal(tf.cast(y, tf.float32), tf.cast(expected_y, tf.float32))
        np.testing.assert_array_equal(tf.cast(gradient, tf.float32), tf.cast(expected_gradient, tf.float32))
    kept = float(tf.reduce_mean(tf.cast(y != 0, tf.float32)))
    assert 0.6 < kept < 0.8  # about 1 - rate of 1536 units
    np.testing.assert_array_equal(ours(x, training=False), x)

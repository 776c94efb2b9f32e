"""LayerNorm: Keras's LayerNormalization with the gradient written out."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import LayerNorm
from tests.testing import value_and_gradients


def _pair(policy):
    """A LayerNorm and a keras.layers.LayerNormalization with the same non-trivial weights."""
    ours, theirs = LayerNorm(epsilon=1e-6, dtype=policy), keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    rng = np.random.default_rng(0)
    for layer in (ours, theirs):
        layer.build((None, None, 48))
    gamma, beta = rng.normal(1.0, 0.3, 48).astype(np.float32), rng.normal(0.0, 0.3, 48).astype(np.float32)
    for layer in (ours, theirs):
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    return ours, theirs


@pytest.mark.parametrize("policy, tolerance", [("float32", 2e-5), ("mixed_bfloat16", 2e-2)])
def test_equals_keras_layer_normalization_forward_and_backward(policy, tolerance):
    ours, theirs = _pair(policy)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(2.0, 3.0, (3, 5, 48)), ours.compute_dtype)  # off-centre, not unit scale
    upstream = tf.constant(rng.normal(size=(3, 5, 48)), tf.float32)
    y, gradients = value_and_gradients(ours, x, upstream)
    expected_y, expected_gradients = value_and_gradients(theirs, x, upstream)
    assert y.dtype == expected_y.dtype
    np.testing.assert_allclose(tf.cast(y, tf.float32), tf.cast(expected_y, tf.float32), atol=tolerance, rtol=tolerance)
    for name, got, expected in zip(("x", "gamma", "beta"), gradients, expected_gradients):
        scale = float(tf.reduce_max(tf.abs(tf.cast(expected, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32) / scale, tf.cast(expected, tf.float32) / scale,
                                   atol=tolerance, err_msg=name)


def test_config_and_weights_are_keras_layer_normalizations():
    ours, theirs = _pair("float32")
    assert [w.path.split("/")[-1] for w in ours.weights] == [w.path.split("/")[-1] for w in theirs.weights]
    restored = LayerNorm.from_config(ours.get_config())
    assert restored.epsilon == 1e-6 and isinstance(restored, keras.layers.LayerNormalization)

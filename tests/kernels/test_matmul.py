"""Dense: Keras's Dense with the kernel product's backward pass through a transposed copy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import Dense
from tests.testing import value_and_gradients


def _pair(policy, **kwargs):
    """Our Dense and keras.layers.Dense with the same weights."""
    ours, theirs = Dense(24, dtype=policy, **kwargs), keras.layers.Dense(24, dtype=policy, **kwargs)
    for layer in (ours, theirs):
        layer.build((None, 40))
    rng = np.random.default_rng(0)
    for ours_weight, their_weight in zip(ours.weights, theirs.weights):
        value = rng.normal(size=ours_weight.shape).astype(np.float32)
        ours_weight.assign(value)
        their_weight.assign(value)
    return ours, theirs


@pytest.mark.parametrize("shape", [(7, 40), (3, 5, 40)])
@pytest.mark.parametrize("policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 2e-2)])
@pytest.mark.parametrize("kwargs", [dict(activation="relu"), dict(use_bias=False)])
def test_equals_keras_dense_forward_and_backward(shape, policy, tolerance, kwargs):
    """Same outputs (static shape included) and same gradients for the inputs, kernel and bias."""
    ours, theirs = _pair(policy, **kwargs)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=shape), ours.compute_dtype)
    upstream = tf.constant(rng.normal(size=(*shape[:-1], 24)), tf.float32)
    y, gradients = value_and_gradients(ours, x, upstream)
    expected_y, expected_gradients = value_and_gradients(theirs, x, upstream)
    assert y.shape == expected_y.shape and y.dtype == expected_y.dtype
    np.testing.assert_allclose(tf.cast(y, tf.float32), tf.cast(expected_y, tf.float32), rtol=tolerance, atol=tolerance)
    assert len(gradients) == len(expected_gradients) == 1 + len(ours.trainable_weights)
    for got, expected in zip(gradients, expected_gradients):
        scale = float(tf.reduce_max(tf.abs(tf.cast(expected, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32) / scale, tf.cast(expected, tf.float32) / scale, atol=tolerance)


def test_static_shape_survives_unknown_batch_dimensions():
    layer = Dense(6)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4])])
    def apply(x):
        y = layer(x)
        assert y.shape.as_list() == [None, None, 6]
        return y

    assert apply(tf.ones([2, 3, 4])).shape == (2, 3, 6)


def test_checkpoints_of_keras_dense_restore_into_it(tmp_path):
    """Same variables under the same names: a checkpoint of keras.layers.Dense restores exactly."""
    ours, theirs = _pair("float32", activation="relu")
    for weight in ours.weights:
        weight.assign(tf.zeros_like(weight))
    path = tf.train.Checkpoint(layer=theirs).write(str(tmp_path / "keras_dense"))
    tf.train.Checkpoint(layer=ours).read(path).assert_existing_objects_matched()
    for ours_weight, their_weight in zip(ours.weights, theirs.weights):
        np.testing.assert_array_equal(ours_weight.numpy(), their_weight.numpy())
    restored = Dense.from_config(ours.get_config())
    assert isinstance(restored, keras.layers.Dense) and restored.units == 24 and restored.activation is keras.activations.relu

import numpy as np
import tensorflow as tf

from t2t_keras.layers.feed_forward import FeedForward
from tests.testing import run_layer_test


def test_layer_contract():
    run_layer_test(
        FeedForward,
        dict(filter_size=12, dropout=0.1),
        dict(inputs=tf.random.stateless_normal((2, 3, 8), seed=(1, 2))),
        expected_output_shape=(2, 3, 8),
        expected_num_trainable_weights=4,
    )


def test_equals_relu_formula():
    layer = FeedForward(filter_size=12)
    x = tf.random.stateless_normal((2, 3, 8), seed=(1, 2))
    outputs = layer(x).numpy()
    w1, b1, w2, b2 = (w.numpy() for w in layer.trainable_weights)
    np.testing.assert_allclose(outputs, np.maximum(0, x.numpy() @ w1 + b1) @ w2 + b2, atol=1e-5)


def test_relu_dropout_zeroes_inner_activations_in_training_only():
    """With W2 = I and b2 = 0 the output is the ReLU layer itself: in training some positive
    activations are zeroed and the rest scaled by 1 / (1 - rate); in inference none are."""
    rate = 0.5
    layer = FeedForward(filter_size=8, dropout=rate)
    x = tf.random.stateless_normal((4, 16, 8), seed=(1, 2))
    layer(x)
    layer.output_dense.kernel.assign(tf.eye(8))
    activations = np.maximum(0, x.numpy() @ layer.inner_dense.kernel.numpy() + layer.inner_dense.bias.numpy())
    np.testing.assert_allclose(layer(x, training=False), activations, atol=1e-6)
    dropped = layer(x, training=True).numpy()
    positive = activations > 0
    zeroed = positive & (dropped == 0.0)
    assert 0.3 < zeroed.sum() / positive.sum() < 0.7
    kept = positive & ~zeroed
    np.testing.assert_allclose(dropped[kept], activations[kept] / (1 - rate), rtol=1e-5, atol=1e-6)  # numpy and TF sum in different orders

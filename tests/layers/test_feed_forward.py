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

import numpy as np
import tensorflow as tf

from t2t_keras.layers import masks


def test_padding_and_key_padding():
    ids = tf.constant([[5, 6, 0], [7, 0, 0]])
    np.testing.assert_array_equal(masks.padding_mask(ids), [[True, True, False], [True, False, False]])
    assert masks.key_padding_mask(ids).shape == (2, 1, 3)


def test_causal_is_lower_triangular():
    np.testing.assert_array_equal(masks.causal_mask(4)[0], np.tril(np.ones((4, 4), bool)))


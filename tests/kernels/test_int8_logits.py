"""The native int8 output product against the same quantisation written out in numpy."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.int8_logits import int8_logits, quantized_output_weights


def _quantized(values):
    """int32 q and float32 scales of each row, as the kernels quantise: scale = max |v| / 127 (1 for
    a zero row), q = round-half-even(v / scale)."""
    largest = np.abs(values).max(-1)
    scales = np.where(largest > 0, largest / np.float32(127), np.float32(1)).astype(np.float32)
    return np.rint(np.clip(values / scales[:, None], -127, 127)).astype(np.int32), scales


def _reference(states, table, vocabulary, group_rows):
    weights, weight_scales = _quantized(table)
    rows, row_scales = _quantized(states)
    columns = vocabulary[np.repeat(np.arange(len(group_rows)), group_rows)]  # each row's group's tokens
    sums = np.einsum("nd,nud->nu", rows, weights[columns])
    return sums.astype(np.float32) * (row_scales[:, None] * weight_scales[columns])


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("tokens, depth, groups, group_rows", [
    (300, 16, 3, [4, 0, 9]),  # an empty group; 37 tokens a group: a last block of 5
    (500, 32, 1, [7]),        # the whole vocabulary, one group
    (8000, 128, 8, [32, 5, 1, 2, 3, 6, 7, 31]),  # a demo-model step's groups, every row tile's remainder
])
def test_int8_logits_are_the_quantised_product(dtype, tokens, depth, groups, group_rows):
    """Exactly the int32 sums of the quantised rows and weights, scaled back and rounded to the
    states' dtype: each row against its own group's tokens (a zero row and a zero weight row
    included)."""
    assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(tokens)
    table = rng.normal(size=(tokens, depth)).astype(np.float32)
    table[5] = 0
    width = 37 if tokens == 300 else tokens if groups == 1 else 2000
    vocabulary = rng.integers(0, tokens, (groups, width)).astype(np.int32)
    vocabulary[0, 0] = 5
    states = rng.normal(size=(sum(group_rows), depth)).astype(np.float32)
    states[1] = 0
    table, states = (tf.cast(tf.cast(t, dtype), tf.float32).numpy() for t in (table, states))  # what the kernels read
    weights = quantized_output_weights(tf.cast(table, dtype), tf.constant(vocabulary))
    logits = int8_logits(tf.cast(states, dtype), weights, tf.constant(group_rows, tf.int32))
    assert logits.dtype == dtype
    expected = tf.cast(_reference(states, table, vocabulary, group_rows), dtype)
    np.testing.assert_array_equal(tf.cast(logits, tf.float32).numpy(), tf.cast(expected, tf.float32).numpy())


def test_int8_logits_are_close_to_the_float_product():
    """What quantisation costs on a trained-like scale: within 2% of the largest logit."""
    rng = np.random.default_rng(0)
    table = rng.normal(scale=128 ** -0.5, size=(8000, 128)).astype(np.float32)
    states = rng.normal(size=(64, 128)).astype(np.float32)
    logits = int8_logits(tf.constant(states), quantized_output_weights(tf.constant(table)))
    exact = states @ table.T
    assert np.abs(logits.numpy() - exact).max() < 0.02 * np.abs(exact).max()


def test_rows_that_do_not_match_the_groups_are_refused_in_one_line():
    weights = quantized_output_weights(tf.zeros([10, 8]), tf.zeros([2, 3], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="group_rows sum to 5, not 4"):
        int8_logits(tf.zeros([4, 8]), weights, tf.constant([2, 3]))

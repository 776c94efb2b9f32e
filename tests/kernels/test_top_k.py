"""The blocked top-k against tf.math.top_k."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding.beam_search import NEG_INF
from t2t_keras.kernels import native
from t2t_keras.kernels.top_k import top_k_rows


@pytest.mark.parametrize("vocab, k, unknown_width", [
    (8192, 8, False), (8000, 8, False), (32000, 42, False), (8191, 8, False), (300, 8, False),
    # a shortlist's columns, unknown when the graph is built: padded to blocks, or whole when short
    (2900, 8, True), (8191, 8, True), (1000, 8, True),
])
@pytest.mark.parametrize("native_kernel", [False, True])
def test_top_k_rows_equals_top_k_ties_and_masks_included(vocab, k, unknown_width, native_kernel):
    """The blocked top-k and the native one give tf.math.top_k's values and indices: on random
    logits, on values with many ties (small integers) and on rows masked to NEG_INF but for a
    few tokens, which is what a token filter makes; and on rows of -inf but for fewer than k."""
    if native_kernel:
        assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(vocab)
    random_rows = rng.normal(size=(6, vocab)).astype(np.float32)
    tied_rows = rng.integers(0, 5, size=(6, vocab)).astype(np.float32)
    masked_rows = np.full((6, vocab), NEG_INF, np.float32)
    masked_rows[np.arange(6), rng.integers(0, vocab, size=6)] = 0.5
    masked_rows[:3, -1] = 1.0
    infinite_rows = np.full((6, vocab), -np.inf, np.float32)
    infinite_rows[np.arange(6), rng.integers(0, vocab, size=6)] = rng.normal(size=6)
    top_k = tf.function(lambda rows: top_k_rows(rows, k, native_kernel), input_signature=[tf.TensorSpec([None, None], tf.float32)],
                        autograph=False) if unknown_width else lambda rows: top_k_rows(rows, k, native_kernel)
    for rows in (random_rows, tied_rows, masked_rows, infinite_rows):
        expected = tf.math.top_k(rows, k=k)
        values, indices = top_k(tf.constant(rows))
        np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())

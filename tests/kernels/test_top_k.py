"""The blocked top-k against tf.math.top_k."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding.beam_search import NEG_INF
from t2t_keras.kernels.top_k import top_k_rows


@pytest.mark.parametrize("vocab, k", [(8192, 8), (8000, 8), (32000, 42), (8191, 8), (300, 8)])
def test_top_k_rows_equals_top_k_ties_and_masks_included(vocab, k):
    """The blocked top-k gives tf.math.top_k's values and indices: on random logits, on values
    with many ties (small integers) and on rows masked to NEG_INF but for a few tokens, which
    is what a token filter makes."""
    rng = np.random.default_rng(vocab)
    random_rows = rng.normal(size=(6, vocab)).astype(np.float32)
    tied_rows = rng.integers(0, 5, size=(6, vocab)).astype(np.float32)
    masked_rows = np.full((6, vocab), NEG_INF, np.float32)
    masked_rows[np.arange(6), rng.integers(0, vocab, size=6)] = 0.5
    masked_rows[:3, -1] = 1.0
    for rows in (random_rows, tied_rows, masked_rows):
        expected = tf.math.top_k(rows, k=k)
        values, indices = top_k_rows(tf.constant(rows), k)
        np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())

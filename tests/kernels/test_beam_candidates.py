"""The native beam kernel against the graph ops it replaces in a search run in this process."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.beam_candidates import NEG_INF, row_candidates


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("vocab, k, eos_column", [(8000, 8, 2), (8191, 8, 8190), (300, 8, 0), (5, 5, 4)])
@pytest.mark.parametrize("masked", [False, True])
def test_native_row_candidates_equal_the_graph_ops(dtype, vocab, k, eos_column, masked):
    """The same columns (ties to the lower one) and log-probabilities to float32 rounding, the
    logits read in their own dtype: on random logits, on many ties (small integers), on rows of
    NEG_INF but for a few columns and on rows of -inf but for one; with each sentence's columns
    (3 sentences of 2 rows) masked or not."""
    assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(vocab)
    random_rows = rng.normal(scale=3.0, size=(6, vocab))
    tied_rows = rng.integers(0, 5, size=(6, vocab))
    masked_rows = np.full((6, vocab), NEG_INF)
    masked_rows[np.arange(6), rng.integers(0, vocab, size=6)] = 0.5
    masked_rows[:3, -1] = 1.0
    infinite_rows = np.full((6, vocab), -np.inf)
    infinite_rows[np.arange(6), rng.integers(0, vocab, size=6)] = rng.normal(size=6)
    column_mask = None
    if masked:  # each sentence keeps a random half of the columns, and its rows' best one
        column_mask = rng.random((3, vocab)) < 0.5
        column_mask[np.arange(6) // 2, np.argmax(random_rows, axis=1)] = True
        column_mask = tf.constant(column_mask)
    for rows in (random_rows, tied_rows, masked_rows, infinite_rows):
        logits = tf.cast(tf.constant(rows, tf.float32), dtype)
        want = row_candidates(logits, k, eos_column, column_mask=column_mask)
        got = row_candidates(logits, k, eos_column, native_kernel=True, column_mask=column_mask)
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        for got_log_probs, want_log_probs in ((got[0], want[0]), (got[2], want[2])):
            np.testing.assert_allclose(got_log_probs.numpy(), want_log_probs.numpy(), rtol=2e-6, atol=2e-6)


def test_an_eos_column_outside_the_rows_is_refused_in_one_line():
    with pytest.raises(tf.errors.InvalidArgumentError, match="eos_column 9 is outside the rows' 9 columns"):
        row_candidates(tf.zeros([2, 9]), 2, 9, native_kernel=True)

"""The native attention of a decoding step against the graph ops it replaces, and the decoder
that runs it: the same searches with it and without."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.attention_step import MASKED_LOGIT, attention_step, graph_attention_step, implementation_timings


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("batch, heads, queries, length, depth, value_depth", [
    (6, 4, 1, 7, 32, 32),  # self-attention: a query per hypothesis over its cache (the AVX-512 path)
    (3, 4, 4, 9, 32, 32),  # cross-attention: a sentence's 4 beams over its encoder output
    (5, 2, 3, 1, 16, 16), (2, 2, 1, 40, 64, 64), (1, 1, 2, 3, 128, 128),
    (2, 3, 2, 40, 24, 24), (2, 2, 2, 5, 32, 16),  # depths the portable loop takes
])
def test_native_attention_equals_the_graph_ops(dtype, batch, heads, queries, length, depth, value_depth):
    """The same context to float32 rounding (bfloat16: the products' and the weights' roundings
    where the graph rounds them, so equal), with the keys of each row masked or not, a row's
    every key but one masked included; the heads behind the queries, as the output projection
    reads them."""
    assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(batch * 100 + length)
    q = tf.cast(rng.normal(scale=0.3, size=(batch, heads, queries, depth)), dtype)
    k = tf.cast(rng.normal(size=(batch, heads, length, depth)), dtype)
    v = tf.cast(rng.normal(size=(batch, heads, length, value_depth)), dtype)
    kept = rng.random((batch, length)) < 0.6
    kept[:, 0] = True
    kept[0, 1:] = False
    for bias in (None, tf.constant(np.where(kept, 0.0, MASKED_LOGIT), tf.float32)):
        got, want = attention_step(q, k, v, bias), graph_attention_step(q, k, v, bias)
        assert got.shape == (batch, queries, heads, value_depth) and got.dtype == dtype
        np.testing.assert_allclose(tf.cast(got, tf.float32).numpy(), tf.cast(want, tf.float32).numpy(),
                                   rtol=2e-6, atol=2e-6)


def test_keys_and_values_of_another_shape_are_refused_in_one_line():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"T2tAttentionStep: keys \[2, 4, 5, 32\] and values must match"):
        attention_step(tf.zeros([2, 4, 1, 16]), tf.zeros([2, 4, 5, 32]), tf.zeros([2, 4, 5, 16]))


def test_the_alternatives_are_timed_here():
    timings = implementation_timings(16, 2, 16, 8)
    assert sorted(timings) == ["graph", "native"] and all(ms > 0 for ms in timings.values())

"""The fused output-layer loss: every layout is the cross-entropy of the logits it replaces."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.kernels import native, output_loss
from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy, smoothing_weights
from t2t_keras.kernels.output_loss import CHUNK_ROWS, LAYOUTS, layout_timings, projected_cross_entropy, projected_rdrop_loss


def _loss_and_gradients(loss_of, states, table, weights):
    with tf.GradientTape() as tape:
        tape.watch([states, table])
        total = tf.reduce_sum(loss_of(states, table) * weights)
    return total, tape.gradient(total, [states, table])


def _assert_matches(total, gradients, expected, expected_gradients, tolerance):
    """The weighted loss to `tolerance` relative, each gradient to `tolerance` of its largest entry."""
    np.testing.assert_allclose(float(total), float(expected), rtol=tolerance)
    for got, want in zip(gradients, expected_gradients):
        assert got.dtype == want.dtype and got.shape == want.shape
        scale = float(tf.reduce_max(tf.abs(tf.cast(want, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32), tf.cast(want, tf.float32), atol=tolerance * scale, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype, tolerance", [(tf.float32, 1e-5), (tf.bfloat16, 2e-2)])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows", [37, 2 * CHUNK_ROWS + 45])  # one chunk, part padding; three, the last part padding
def test_each_layout_equals_the_cross_entropy_of_the_logits(layout, dtype, tolerance, label_smoothing, rows):
    """Per-token losses and the gradients for states and table as autodiff of
    smoothed_cross_entropy(targets, states @ table^T) gives them, tokens weighted unequally."""
    rng = np.random.default_rng(0)
    states = tf.constant(rng.normal(size=(rows, 16)), dtype)
    table = tf.constant(rng.normal(size=(50, 16)) * 0.3, dtype)
    targets = tf.constant(rng.integers(0, 50, rows), tf.int32)
    weights = tf.constant(rng.uniform(size=rows), tf.float32)

    def reference(states, table):
        logits = tf.cast(tf.matmul(states, table, transpose_b=True), tf.float32)
        return smoothed_cross_entropy(targets, logits, label_smoothing)

    expected, expected_gradients = _loss_and_gradients(reference, states, table, weights)
    total, gradients = _loss_and_gradients(
        lambda s, t: projected_cross_entropy(s, t, targets, label_smoothing, layout), states, table, weights)
    _assert_matches(total, gradients, expected, expected_gradients, tolerance)


@pytest.mark.parametrize("dtype, tolerance", [(tf.float32, 1e-5), (tf.bfloat16, 2e-2)])
@pytest.mark.parametrize("label_smoothing, alpha", [(0.0, 0.7), (0.1, 5.0)])
def test_rdrop_loss_equals_the_formula_by_autodiff(dtype, tolerance, label_smoothing, alpha):
    """Rows n and n + N are one token twice: each row's loss is its smoothed cross-entropy plus
    alpha / 2 * KL(p_row || p_twin), and the written-out gradient is autodiff's of that formula,
    with every token weighted differently (a row and its twin too, as the gradient crosses)."""
    rng = np.random.default_rng(1)
    states = tf.constant(rng.normal(size=(2 * 19, 16)), dtype)
    table = tf.constant(rng.normal(size=(50, 16)) * 0.3, dtype)
    targets = tf.constant(np.tile(rng.integers(0, 50, 19), 2), tf.int32)
    weights = tf.constant(rng.uniform(size=2 * 19), tf.float32)

    def formula(states, table):
        logits = tf.cast(tf.matmul(states, table, transpose_b=True), tf.float32)
        log_probs = tf.nn.log_softmax(logits)
        twin = tf.concat([log_probs[19:], log_probs[:19]], axis=0)
        divergence = tf.reduce_sum(tf.exp(log_probs) * (log_probs - twin), axis=-1)
        return smoothed_cross_entropy(targets, logits, label_smoothing) + alpha / 2 * divergence

    losses = projected_rdrop_loss(states, table, targets, label_smoothing, alpha)
    plain = projected_cross_entropy(states, table, targets, label_smoothing)
    assert losses.shape == [2 * 19] and bool(tf.reduce_all(losses > plain))  # the divergences are positive
    expected, expected_gradients = _loss_and_gradients(formula, states, table, weights)
    total, gradients = _loss_and_gradients(
        lambda s, t: projected_rdrop_loss(s, t, targets, label_smoothing, alpha), states, table, weights)
    _assert_matches(total, gradients, expected, expected_gradients, tolerance)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_native_chunk_loss_equals_the_graph_one(dtype):
    """Logits over a wide range (exponentials from 1 down to underflow), the target anywhere:
    the native kernel's losses and unweighted gradient equal the graph's to float32 rounding
    (its exponential is a polynomial within 2 ulp), the gradient in the logits' dtype."""
    assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(2)
    logits = tf.constant(rng.normal(size=(70, 1000)) * 12.0, dtype)
    targets = tf.constant(rng.integers(0, 1000, 70), tf.int32)
    off_value, on_weight = smoothing_weights(0.1, 1000)
    native_losses, native_gradient = output_loss._native_chunk_loss(logits, targets, off_value, on_weight, 0.1)
    graph_losses, graph_gradient = output_loss._graph_chunk_loss(logits, targets, off_value, on_weight, 0.1)
    assert native_gradient.dtype == graph_gradient.dtype == dtype and native_losses.dtype == tf.float32
    np.testing.assert_allclose(native_losses, graph_losses, rtol=1e-6)
    # float32: to a few ulp of each probability; bfloat16: the same rounding, or one bfloat16 ulp apart
    atol, rtol = (1e-7, 1e-5) if dtype == tf.float32 else (1e-7, 2**-7)
    np.testing.assert_allclose(tf.cast(native_gradient, tf.float32), tf.cast(graph_gradient, tf.float32), atol=atol, rtol=rtol)


def test_the_native_chunk_loss_keeps_a_nan_and_names_a_target_outside_the_vocabulary():
    assert native.library() is not None, native.unavailable_reason()
    off_value, on_weight = smoothing_weights(0.0, 4)
    logits = tf.constant([[0.0, 1.0, np.nan, 2.0], [0.0, 1.0, 3.0, 2.0]])
    losses, _ = output_loss._native_chunk_loss(logits, tf.constant([0, 1]), off_value, on_weight, 0.0)
    assert np.isnan(losses[0]) and np.isfinite(losses[1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="target 4 of row 1 is outside the vocabulary of 4"):
        output_loss._native_chunk_loss(logits, tf.constant([0, 4]), off_value, on_weight, 0.0)


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="layout must be one of rows, rows_copy, columns"):
        projected_cross_entropy(tf.zeros([2, 4]), tf.zeros([5, 4]), tf.zeros([2], tf.int32), 0.1, "diagonal")


def test_layout_timings_time_every_layout():
    timings = layout_timings(rows=16, hidden_size=8, vocab_size=32, rounds=1)
    assert set(timings) == set(LAYOUTS) and all(ms > 0 for ms in timings.values())

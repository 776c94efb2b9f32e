"""LayerNorm: Keras's LayerNormalization with the gradient written out."""

import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.layers import LayerNorm
from t2t_keras.layers.residual import ResidualNorm
from tests.testing import value_and_gradients

IMPLEMENTATIONS = ["graph", pytest.param("native", marks=pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None, reason="no C++ compiler here to build the native kernels"))]


def _pair(policy, implementation="graph"):
    """A LayerNorm and a keras.layers.LayerNormalization with the same non-trivial weights."""
    if implementation == "native":
        assert native.library() is not None, native.unavailable_reason()
    ours, theirs = LayerNorm(epsilon=1e-6, dtype=policy), keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    ours.implementation = implementation
    rng = np.random.default_rng(0)
    for layer in (ours, theirs):
        layer.build((None, None, 48))
    gamma, beta = rng.normal(1.0, 0.3, 48).astype(np.float32), rng.normal(0.0, 0.3, 48).astype(np.float32)
    for layer in (ours, theirs):
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    return ours, theirs


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("policy, tolerance", [("float32", 2e-5), ("mixed_bfloat16", 2e-2)])
def test_equals_keras_layer_normalization_forward_and_backward(policy, tolerance, implementation):
    ours, theirs = _pair(policy, implementation)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(2.0, 3.0, (3, 5, 48)), ours.compute_dtype)  # off-centre, not unit scale
    upstream = tf.constant(rng.normal(size=(3, 5, 48)), tf.float32)
    y, gradients = value_and_gradients(ours, x, upstream)
    expected_y, expected_gradients = value_and_gradients(theirs, x, upstream)
    assert y.dtype == expected_y.dtype
    np.testing.assert_allclose(tf.cast(y, tf.float32), tf.cast(expected_y, tf.float32), atol=tolerance, rtol=tolerance)
    for name, got, expected in zip(("x", "gamma", "beta"), gradients, expected_gradients):
        scale = float(tf.reduce_max(tf.abs(tf.cast(expected, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32) / scale, tf.cast(expected, tf.float32) / scale,
                                   atol=tolerance, err_msg=name)


def test_config_and_weights_are_keras_layer_normalizations():
    ours, theirs = _pair("float32")
    assert [w.path.split("/")[-1] for w in ours.weights] == [w.path.split("/")[-1] for w in theirs.weights]
    restored = LayerNorm.from_config(ours.get_config())
    assert restored.epsilon == 1e-6 and isinstance(restored, keras.layers.LayerNormalization)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS[1:])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_native_kernels_compute_the_graph_kernels_values(policy, implementation):
    """Over many rows (split between threads): outputs and gradients as the graph kernels', to
    float32 rounding (bfloat16 outputs: one rounding step apart at most), and bit-identical
    from run to run (the parameters' gradients summed in a fixed order: resumes stay exact)."""
    graph, _ = _pair(policy)
    ours, _ = _pair(policy, implementation)
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(1.0, 4.0, (64, 33, 48)), ours.compute_dtype)
    upstream = tf.constant(rng.normal(size=(64, 33, 48)), tf.float32)
    y, gradients = value_and_gradients(ours, x, upstream)
    expected_y, expected_gradients = value_and_gradients(graph, x, upstream)
    again_y, again_gradients = value_and_gradients(ours, x, upstream)
    bfloat16 = policy == "mixed_bfloat16"
    np.testing.assert_allclose(tf.cast(y, tf.float32), tf.cast(expected_y, tf.float32),
                               rtol=2**-7 if bfloat16 else 1e-5, atol=1e-5)
    for name, got, expected in zip(("x", "gamma", "beta"), gradients, expected_gradients):
        scale = float(tf.reduce_max(tf.abs(tf.cast(expected, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32) / scale, tf.cast(expected, tf.float32) / scale,
                                   atol=2**-8 if bfloat16 and name == "x" else 1e-5, err_msg=name)
    assert np.array_equal(again_y, y)
    for got, again in zip(gradients, again_gradients):
        assert np.array_equal(got, again)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS[1:])
def test_inference_runs_the_graph_kernels_whatever_the_implementation(implementation):
    """Exported graphs must need nothing but TensorFlow: outside training, no native op runs."""
    graph, _ = _pair("float32")
    ours, _ = _pair("float32", implementation)
    x = tf.constant(np.random.default_rng(3).normal(size=(2, 3, 48)), tf.float32)
    traced = tf.function(lambda x: ours(x, training=False)).get_concrete_function(x)
    assert not [op.type for op in traced.graph.get_operations() if op.type.startswith("T2t")]
    assert np.array_equal(ours(x, training=False), graph(x, training=False))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS[1:])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_fused_residual_kernel_equals_dropout_add_and_layer_norm_bit_for_bit(policy, implementation):
    """Post-norm's LN(x + dropout(h)) in training as one native kernel each way: the same
    units dropped (the dropout's own seed stream) and every value rounded as the separate ops
    round it, so outputs and all gradients are bit-identical to dropout, add and layer norm."""
    if implementation == "native":
        assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(4)
    inputs = rng.normal(size=(2, 16, 9, 48))
    upstream = tf.constant(rng.normal(size=(16, 9, 48)), tf.float32)
    results = {}
    for fused in (False, True):
        keras.utils.set_random_seed(7)
        residual = ResidualNorm("post", dropout=0.3, epsilon=1e-6, dtype=policy)
        residual.build((16, 9, 48))
        residual.layer_norm.implementation = implementation
        residual.layer_norm.gamma.assign(np.linspace(0.5, 1.5, 48))
        residual.layer_norm.beta.assign(np.linspace(-0.2, 0.2, 48))
        x, h = tf.constant(inputs[0], residual.compute_dtype), tf.constant(inputs[1], residual.compute_dtype)
        with tf.GradientTape() as tape:
            tape.watch([x, h])
            if fused:
                y = residual.finish(x, h, training=True)
            else:
                y = residual.layer_norm(x + residual.dropout_layer(h, training=True), training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        results[fused] = [y, *tape.gradient(loss, [x, h, *residual.trainable_weights])]
    dropped = np.asarray(results[True][2]) == 0  # h's gradient is zero exactly where h was dropped
    assert 0.2 < dropped.mean() < 0.4
    for name, separate, fused in zip(("y", "x", "h", "gamma", "beta"), results[False], results[True]):
        assert np.array_equal(np.asarray(tf.cast(separate, tf.float32)), np.asarray(tf.cast(fused, tf.float32))), name


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS[1:])
def test_a_native_post_norm_training_step_runs_the_fused_kernel(implementation):
    residual = ResidualNorm("post", dropout=0.1, epsilon=1e-6)
    residual.build((2, 3, 48))
    residual.layer_norm.implementation = implementation
    x = tf.zeros((2, 3, 48))

    def op_types(training):
        graph = tf.function(lambda x: residual.finish(x, x, training=training)).get_concrete_function(x).graph
        return {op.type for op in graph.get_operations()}

    assert "T2tDropoutAddLayerNorm" in op_types(True)
    assert not {name for name in op_types(False) if name.startswith("T2t")}

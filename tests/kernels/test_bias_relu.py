"""The FFN's bias + ReLU as one native kernel each way: the graph's values, training only."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.bias_relu import native_bias_relu
from t2t_keras.layers.feed_forward import FeedForward
from tests.testing import value_and_gradients

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                                reason="no C++ compiler here to build the native kernels")


def _feed_forward(policy, implementation):
    assert native.library() is not None, native.unavailable_reason()
    layer = FeedForward(96, dtype=policy)
    layer.build((None, None, 48))
    rng = np.random.default_rng(0)
    for weight in layer.weights:  # biases of either sign: some units on, some off
        weight.assign(rng.normal(0.0, 0.3, weight.shape))
    layer.inner_dense.implementation = implementation
    return layer


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_kernel_computes_the_graphs_values_and_an_exact_bias_gradient(dtype):
    """max(0, x + bias) equal to the graph's bit for bit (the bias rounded to x's dtype as the
    graph's cast rounds it), x's gradient too; the bias' gradient within float32 rounding of the
    exact (float64) sum over 2112 rows, where the graph's bfloat16 sum strays by 1e-3 of its size."""
    assert native.library() is not None, native.unavailable_reason()
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(64, 33, 96)), dtype)
    bias = tf.constant(rng.normal(0.0, 0.3, 96), tf.float32)
    upstream = tf.constant(rng.normal(size=(64, 33, 96)), dtype)
    results = {}
    for name, function in (("graph", lambda x, bias: tf.nn.relu(x + tf.cast(bias, x.dtype))), ("native", native_bias_relu)):
        with tf.GradientTape() as tape:
            tape.watch([x, bias])
            y = function(x, bias)
        results[name] = [np.asarray(tf.cast(value, tf.float32)) for value in (y, *tape.gradient(y, [x, bias], output_gradients=upstream))]
    (y, dx, dbias), (expected_y, expected_dx, graph_dbias) = results["native"], results["graph"]
    assert np.array_equal(y, expected_y) and np.array_equal(dx, expected_dx)
    exact = np.where(y > 0, np.asarray(tf.cast(upstream, tf.float32), np.float64), 0.0).sum(axis=(0, 1))
    scale = np.abs(exact).max()
    np.testing.assert_allclose(dbias / scale, exact / scale, atol=1e-6)
    if dtype == tf.bfloat16:
        assert np.abs(graph_dbias - exact).max() > 1e-4 * scale  # what the float32 sum mends


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_a_feed_forward_layer_trains_as_with_the_graphs_ops(policy):
    """The FFN with the native kernel: outputs equal to the graph's, gradients to float rounding
    (under mixed precision but the inner bias', which is the exact float32 sum of the test above
    where the graph's bfloat16 sum over 2112 rows strays by up to 5% of the largest); bit-identical
    from run to run."""
    graph, ours = _feed_forward(policy, "graph"), _feed_forward(policy, "native")
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(64, 33, 48)), ours.compute_dtype)
    upstream = tf.constant(rng.normal(size=(64, 33, 48)), tf.float32)
    y, gradients = value_and_gradients(ours, x, upstream)
    expected_y, expected_gradients = value_and_gradients(graph, x, upstream)
    again_y, again_gradients = value_and_gradients(ours, x, upstream)
    assert np.array_equal(np.asarray(tf.cast(y, tf.float32)), np.asarray(tf.cast(expected_y, tf.float32)))
    names = ["x"] + [weight.path for weight in ours.trainable_weights]
    for name, got, expected in zip(names, gradients, expected_gradients):
        if policy == "mixed_bfloat16" and name.endswith("inner/bias"):
            continue
        scale = float(tf.reduce_max(tf.abs(tf.cast(expected, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32) / scale, tf.cast(expected, tf.float32) / scale,
                                   atol=2**-7 if policy == "mixed_bfloat16" else 1e-5, err_msg=name)
    assert np.array_equal(again_y, y)
    for got, again in zip(gradients, again_gradients):
        assert np.array_equal(got, again)


def test_only_a_training_step_runs_the_native_kernels():
    ours = _feed_forward("float32", "native")
    x = tf.zeros((2, 3, 48))

    def op_types(training):
        graph = tf.function(lambda x: ours(x, training=training)).get_concrete_function(x).graph
        return {op.type for op in graph.get_operations()}

    assert "T2tBiasRelu" in op_types(True)
    assert not {name for name in op_types(False) if name.startswith("T2t")}

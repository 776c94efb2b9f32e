"""A shared layer-test harness: every layer gets the same serialization and call checks."""

import inspect
import json

import keras
import numpy as np
import tensorflow as tf


def run_layer_test(layer_cls, init_kwargs, call_kwargs, expected_output_shape, expected_num_trainable_weights):
    """Asserts for `layer_cls(**init_kwargs)` called as `layer(**call_kwargs)`:

    * eager call gives `expected_output_shape` and the expected weight count;
    * get_config -> from_config round trip gives a JSON-equal config and equal outputs
      once the weights are copied;
    * a symbolic call on keras.Input gives the shape with a free batch dimension;
    * every trainable weight receives a gradient;
    * under mixed_bfloat16 the output is bfloat16 and the weights stay float32.
    """
    layer = layer_cls(**init_kwargs)
    outputs = layer(**call_kwargs)
    assert tuple(outputs.shape) == tuple(expected_output_shape)
    assert len(layer.trainable_weights) == expected_num_trainable_weights

    config = layer.get_config()
    restored = layer_cls.from_config(json.loads(json.dumps(config)))
    assert json.dumps(restored.get_config(), sort_keys=True) == json.dumps(config, sort_keys=True)
    restored(**call_kwargs)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(restored(**call_kwargs), outputs, atol=1e-6)

    symbolic_kwargs = {
        name: keras.Input(shape=value.shape[1:], dtype=value.dtype) if _is_batched_array(value) else value
        for name, value in call_kwargs.items()
    }
    symbolic_outputs = layer_cls(**init_kwargs)(**symbolic_kwargs)
    assert tuple(symbolic_outputs.shape[1:]) == tuple(expected_output_shape[1:])

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(layer(**call_kwargs, **_training_kwarg(layer_cls))))
    gradients = tape.gradient(loss, layer.trainable_weights)
    assert all(g is not None for g in gradients), [w.path for w, g in zip(layer.trainable_weights, gradients) if g is None]

    mixed = layer_cls(**init_kwargs, dtype="mixed_bfloat16")
    mixed_outputs = mixed(**call_kwargs)
    assert mixed_outputs.dtype == "bfloat16"
    assert all(w.dtype == "float32" for w in mixed.weights)


def _is_batched_array(value):
    return hasattr(value, "shape") and len(value.shape) >= 2 and value.shape[0] not in (None, 1)


def _training_kwarg(layer_cls):
    return {"training": True} if "training" in inspect.signature(layer_cls.call).parameters else {}


def assert_one_line_error(result, message_start):
    """A CLI run failed with status 2 and exactly one 'error: ...' line, its last line.

    TensorFlow's own C++ start-up lines (CUDA probing) may precede it; they are not ours.
    """
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines and lines[-1].startswith(message_start), result.stderr
    assert sum(line.startswith("error:") for line in lines) == 1, result.stderr

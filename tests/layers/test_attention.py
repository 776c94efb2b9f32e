import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import masks
from t2t_keras.layers.attention import MultiHeadAttention
from tests.testing import run_layer_test

B, L, D = 3, 7, 16


def _inputs(seed=0, length=L):
    return tf.random.stateless_normal((B, length, D), seed=(seed, 1))


def test_layer_contract():
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=4, key_depth=3, value_depth=5, dropout=0.1),
        dict(query=_inputs(), memory=_inputs(1, 9), attention_mask=tf.ones((B, L, 9), bool)),
        expected_output_shape=(B, L, D),
        expected_num_trainable_weights=4,
    )


def test_matches_scaled_dot_product_formula():
    layer = MultiHeadAttention(num_heads=2, key_depth=4, value_depth=3)
    query, memory = _inputs(0), _inputs(1, 5)
    mask = np.random.default_rng(0).random((B, L, 5)) < 0.7
    mask[..., 0] = True
    outputs = layer(query, memory=memory, attention_mask=tf.constant(mask)).numpy()

    wq, wk, wv = (w.numpy().reshape(D, 2, -1) for w in (layer.query_dense.kernel, layer.key_dense.kernel, layer.value_dense.kernel))
    wo = layer.output_dense.kernel.numpy().reshape(2, 3, D)
    expected = np.zeros((B, L, D))
    for head in range(2):
        q = query.numpy() @ wq[:, head]
        k = memory.numpy() @ wk[:, head]
        v = memory.numpy() @ wv[:, head]
        logits = q @ k.transpose(0, 2, 1) / np.sqrt(4)
        logits = np.where(mask, logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        expected += (weights @ v) @ wo[head]
    np.testing.assert_allclose(outputs, expected, atol=1e-5)


def test_masked_keys_do_not_change_outputs():
    layer = MultiHeadAttention(num_heads=2, key_depth=4, value_depth=4)
    query, memory = _inputs(0), _inputs(1, 6)
    mask = tf.constant([[[True] * 4 + [False] * 2]])
    changed_memory = tf.concat([memory[:, :4], memory[:, 4:] + 100.0], axis=1)
    np.testing.assert_allclose(
        layer(query, memory=memory, attention_mask=mask),
        layer(query, memory=changed_memory, attention_mask=mask),
        atol=1e-6,
    )


def test_fully_masked_row_is_finite():
    layer = MultiHeadAttention(num_heads=2, key_depth=4, value_depth=4)
    outputs = layer(_inputs(), attention_mask=tf.zeros((B, L, L), bool))
    assert np.isfinite(outputs.numpy()).all()


def test_cached_steps_equal_causal_full_pass():
    layer = MultiHeadAttention(num_heads=4, key_depth=4, value_depth=6)
    x = _inputs()
    full = layer(x, attention_mask=masks.causal_mask(L)).numpy()
    key_cache, value_cache = layer.init_cache(B)
    for index in range(L):
        step, key_cache, value_cache = layer.call_with_cache(x[:, index], key_cache, value_cache)
        np.testing.assert_allclose(step.numpy(), full[:, index], atol=1e-5)
        assert key_cache.shape == (B, 4, index + 1, 4) and value_cache.shape == (B, 4, index + 1, 6)


def test_beams_attend_over_one_copy_of_the_memory():
    """K hypotheses per sentence (rows b * K + k) over the untiled memory [B, ...] give what
    each row gives over its own copy of its sentence's memory, padding mask included."""
    beams = 3
    layer = MultiHeadAttention(num_heads=2, key_depth=4, value_depth=5)
    queries = tf.random.stateless_normal((B * beams, 1, D), seed=(2, 1))
    memory = _inputs(1, 6)
    layer.build(queries.shape, memory.shape)
    mask = tf.constant([[[True] * 6], [[True] * 4 + [False] * 2], [[True] * 2 + [False] * 4]])
    keys, values = layer.project_memory(memory)
    shared = layer.attend(queries, keys, values, mask).numpy()
    tile = lambda t: tf.repeat(t, beams, axis=0)  # noqa: E731
    tiled = layer.attend(queries, tile(keys), tile(values), tile(mask)).numpy()
    assert shared.shape == (B * beams, 1, D)
    np.testing.assert_allclose(shared, tiled, atol=1e-6)


def test_rejects_bad_dimensions():
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(num_heads=0, key_depth=4, value_depth=4)


def test_attention_dropout_zeroes_weights_in_training_only():
    """With identity projections and one-hot memory rows, the output row is the (dropped-out)
    attention weight row itself: some weights are zeroed and the rest scaled by 1 / (1 - rate)
    in training, and none are touched in inference."""
    rate, length = 0.5, D
    layer = MultiHeadAttention(num_heads=1, key_depth=D, value_depth=D, dropout=rate)
    query, memory = _inputs(0), tf.eye(length, batch_shape=[B])
    layer(query, memory=memory)
    layer.value_dense.kernel.assign(tf.eye(D))
    layer.output_dense.kernel.assign(tf.eye(D))
    _, weights = layer(query, memory=memory, return_attention_scores=True)
    weights = weights.numpy()[:, 0]  # [B, L, keys], all > 0
    np.testing.assert_allclose(layer(query, memory=memory, training=False), weights, rtol=1e-5, atol=1e-7)
    dropped = layer(query, memory=memory, training=True).numpy()
    zeroed = dropped == 0.0
    assert 0.3 < zeroed.mean() < 0.7
    np.testing.assert_allclose(dropped[~zeroed], weights[~zeroed] / (1 - rate), rtol=1e-5)

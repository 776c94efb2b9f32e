import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers import masks
from t2t_keras.layers.block_config import BlockConfig
from t2t_keras.layers.decoder_block import DecoderBlock
from t2t_keras.layers.encoder_block import EncoderBlock
from t2t_keras.layers.residual import ResidualNorm
from tests.testing import run_layer_test

BLOCK = dict(num_heads=2, key_depth=4, value_depth=4, filter_size=16, dropout=0.1, attention_dropout=0.1, relu_dropout=0.1)
B, T, S, D = 2, 5, 6, 8


def _x(seed, length):
    return tf.random.stateless_normal((B, length, D), seed=(seed, 3))


@pytest.mark.parametrize("norm_type", ["post", "pre"])
def test_encoder_block_contract(norm_type):
    run_layer_test(
        EncoderBlock,
        dict(config=BlockConfig(**BLOCK, norm_type=norm_type)),
        dict(inputs=_x(0, S), attention_mask=tf.ones((B, 1, S), bool)),
        expected_output_shape=(B, S, D),
        expected_num_trainable_weights=4 + 4 + 2 * 2,
    )


@pytest.mark.parametrize("norm_type", ["post", "pre"])
def test_decoder_block_contract(norm_type):
    run_layer_test(
        DecoderBlock,
        dict(config=BlockConfig(**BLOCK, norm_type=norm_type)),
        dict(inputs=_x(0, T), memory=_x(1, S), self_attention_mask=masks.causal_mask(T), memory_mask=tf.ones((B, 1, S), bool)),
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=2 * 4 + 4 + 3 * 2,
    )


def _layer_norm(x, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps)


def test_residual_norm_placement():
    """post: LN(x + y); pre: the sub-layer sees LN(x) and the output is x + y (no dropout at inference)."""
    x, y = _x(0, 3), _x(1, 3)
    post, pre = ResidualNorm("post"), ResidualNorm("pre")
    post.build(x.shape)
    pre.build(x.shape)
    np.testing.assert_allclose(post.finish(x, y), _layer_norm(x.numpy() + y.numpy()), atol=1e-5)
    np.testing.assert_array_equal(post.prepare(x), x)
    np.testing.assert_allclose(pre.finish(x, y), x + y, atol=1e-6)
    np.testing.assert_allclose(pre.prepare(x), _layer_norm(x.numpy()), atol=1e-5)


@pytest.mark.parametrize("norm_type", ["post", "pre"])
def test_decoder_cached_steps_equal_full_pass(norm_type):
    block = DecoderBlock(BlockConfig(**BLOCK, norm_type=norm_type))
    x, memory = _x(0, T), _x(1, S)
    memory_mask = tf.constant([[[True] * S]] + [[[True] * 4 + [False] * 2]])
    full = block(x, memory, self_attention_mask=masks.causal_mask(T), memory_mask=memory_mask).numpy()
    memory_keys, memory_values = block.project_memory(memory)
    key_cache, value_cache = block.self_attention.init_cache(B)
    for index in range(T):
        step, key_cache, value_cache = block.call_with_cache(
            x[:, index], memory_keys, memory_values, memory_mask, key_cache, value_cache
        )
        np.testing.assert_allclose(step.numpy(), full[:, index], atol=1e-5)

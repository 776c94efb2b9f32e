"""What encoder and decoder blocks are made of (section 3.1): the `Block` base (its config),
and the three sub-layers built from a `BlockConfig`: an attention, the position-wise FFN, and
the residual connection with LayerNorm around each."""

import keras

from t2t_keras.layers.attention import MultiHeadAttention
from t2t_keras.layers.block_config import BlockConfig
from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.residual import ResidualNorm


class Block(keras.layers.Layer):
    """A layer of a stack, configured by a `BlockConfig` (or its dict, as `get_config` wrote it),
    with the sub-layers every block has; a decoder block adds its cross-attention."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = BlockConfig.of(config)

    def build(self, input_shape):
        """The sub-layers every block has: self-attention and the FFN, each with its residual."""
        config, dtype = self.config, self.dtype_policy
        self.self_attention = attention(config, "self_attention", dtype)
        self.self_attention.build(input_shape)
        self.self_attention_residual = residual(config, "self_attention_residual", input_shape, dtype)
        self.feed_forward = feed_forward(config, input_shape, dtype)
        self.feed_forward_residual = residual(config, "feed_forward_residual", input_shape, dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(config=self.config.to_dict())
        return config


def attention(config: BlockConfig, name: str, dtype) -> MultiHeadAttention:
    """A multi-head attention of the block's heads and depths (built by the caller)."""
    return MultiHeadAttention(
        config.num_heads, config.key_depth, config.value_depth, dropout=config.attention_dropout, dtype=dtype, name=name
    )


def feed_forward(config: BlockConfig, input_shape, dtype) -> FeedForward:
    """The block's position-wise FFN, built."""
    layer = FeedForward(config.filter_size, config.relu_dropout, dtype=dtype, name="feed_forward")
    layer.build(input_shape)
    return layer


def residual(config: BlockConfig, name: str, input_shape, dtype) -> ResidualNorm:
    """The residual connection around one sub-layer, pre- or post-norm as the config says, built."""
    layer = ResidualNorm(norm_type=config.norm_type, dropout=config.dropout, epsilon=config.layer_norm_epsilon,
                         dtype=dtype, name=name)
    layer.build(input_shape)
    return layer

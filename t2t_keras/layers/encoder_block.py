"""One encoder layer: self-attention and a position-wise FFN (section 3.1)."""

import keras

from t2t_keras.layers.attention import MultiHeadAttention
from t2t_keras.layers.block_config import BlockConfig
from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.residual import ResidualNorm


@keras.saving.register_keras_serializable(package="t2t_keras")
class EncoderBlock(keras.layers.Layer):
    """Self-attention then FFN, each inside a residual connection with LayerNorm.

    Args:
      config: a `BlockConfig` (or its dict): heads, depths, d_ff, dropouts, norm placement.

    Call arguments:
      inputs: [B, L, d].
      attention_mask: bool, True = attend, broadcastable to [B, L, L]; normally the source
        padding mask [B, 1, L] (`masks.key_padding_mask`).
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = BlockConfig.of(config)

    def build(self, input_shape):
        self.self_attention = self._attention("self_attention")
        self.self_attention.build(input_shape)
        self.self_attention_residual = self._residual("self_attention_residual", input_shape)
        self.feed_forward = FeedForward(
            self.config.filter_size, self.config.relu_dropout, dtype=self.dtype_policy, name="feed_forward"
        )
        self.feed_forward.build(input_shape)
        self.feed_forward_residual = self._residual("feed_forward_residual", input_shape)

    def _attention(self, name):
        config = self.config
        return MultiHeadAttention(
            config.num_heads, config.key_depth, config.value_depth, dropout=config.attention_dropout,
            dtype=self.dtype_policy, name=name,
        )

    def _residual(self, name, input_shape):
        config = self.config
        residual = ResidualNorm(
            norm_type=config.norm_type, dropout=config.dropout, epsilon=config.layer_norm_epsilon,
            dtype=self.dtype_policy, name=name,
        )
        residual.build(input_shape)
        return residual

    def call(self, inputs, attention_mask=None, training=None, return_attention_scores=False):
        """Outputs [B, L, d]; with `return_attention_scores`, (outputs, weights [B, h, L, L])."""
        x = self.self_attention_residual.prepare(inputs)
        x, weights = self.self_attention(x, attention_mask=attention_mask, training=training, return_attention_scores=True)
        x = self.self_attention_residual.finish(inputs, x, training)
        y = self.feed_forward(self.feed_forward_residual.prepare(x), training=training)
        outputs = self.feed_forward_residual.finish(x, y, training)
        return (outputs, weights) if return_attention_scores else outputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(config=self.config.to_dict())
        return config

"""One encoder layer: self-attention and a position-wise FFN (section 3.1)."""

import keras

from t2t_keras.layers.attention import MultiHeadAttention
from t2t_keras.layers.feed_forward import FeedForward
from t2t_keras.layers.residual import ResidualNorm


@keras.saving.register_keras_serializable(package="t2t_keras")
class EncoderBlock(keras.layers.Layer):
    """Self-attention then FFN, each inside a residual connection with LayerNorm.

    Args:
      num_heads, key_depth, value_depth: of the attention (h, d_k, d_v).
      filter_size: d_ff.
      dropout: P_drop on each sub-layer output, before the residual add.
      attention_dropout: on the attention weights.
      relu_dropout: on the FFN's inner activations.
      norm_type: "post" (paper) or "pre".
      layer_norm_epsilon: of the LayerNorms.

    Call arguments:
      inputs: [B, L, d].
      attention_mask: bool, True = attend, broadcastable to [B, L, L]; normally the source
        padding mask [B, 1, L] (`masks.key_padding_mask`).
    """

    def __init__(
        self,
        num_heads,
        key_depth,
        value_depth,
        filter_size,
        dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
        norm_type="post",
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_depth = key_depth
        self.value_depth = value_depth
        self.filter_size = filter_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.norm_type = norm_type
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, input_shape):
        residual = dict(norm_type=self.norm_type, dropout=self.dropout, epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy)
        self.self_attention = MultiHeadAttention(
            self.num_heads, self.key_depth, self.value_depth, dropout=self.attention_dropout,
            dtype=self.dtype_policy, name="self_attention",
        )
        self.self_attention.build(input_shape)
        self.self_attention_residual = ResidualNorm(**residual, name="self_attention_residual")
        self.self_attention_residual.build(input_shape)
        self.feed_forward = FeedForward(self.filter_size, self.relu_dropout, dtype=self.dtype_policy, name="feed_forward")
        self.feed_forward.build(input_shape)
        self.feed_forward_residual = ResidualNorm(**residual, name="feed_forward_residual")
        self.feed_forward_residual.build(input_shape)

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
        config.update(
            num_heads=self.num_heads,
            key_depth=self.key_depth,
            value_depth=self.value_depth,
            filter_size=self.filter_size,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            relu_dropout=self.relu_dropout,
            norm_type=self.norm_type,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config

"""One encoder layer: self-attention and a position-wise FFN (section 3.1)."""

import keras

from t2t_keras.layers import sublayers


@keras.saving.register_keras_serializable(package="t2t_keras")
class EncoderBlock(sublayers.Block):
    """Self-attention then FFN, each inside a residual connection with LayerNorm.

    Args:
      config: a `BlockConfig` (or its dict): heads, depths, d_ff, dropouts, norm placement.

    Call arguments:
      inputs: [B, L, d].
      attention_mask: bool, True = attend, broadcastable to [B, L, L]; normally the source
        padding mask [B, 1, L] (`masks.key_padding_mask`).
    """

    def call(self, inputs, attention_mask=None, training=None, return_attention_scores=False):
        """Outputs [B, L, d]; with `return_attention_scores`, (outputs, weights [B, h, L, L])."""
        x = self.self_attention_residual.prepare(inputs)
        x, weights = self.self_attention(x, attention_mask=attention_mask, training=training, return_attention_scores=True)
        x = self.self_attention_residual.finish(inputs, x, training)
        y = self.feed_forward(self.feed_forward_residual.prepare(x), training=training)
        outputs = self.feed_forward_residual.finish(x, y, training)
        return (outputs, weights) if return_attention_scores else outputs

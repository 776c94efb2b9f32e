"""One decoder layer: causal self-attention, encoder-decoder attention, FFN (section 3.1)."""

import keras

from t2t_keras.layers import sublayers


@keras.saving.register_keras_serializable(package="t2t_keras")
class DecoderBlock(sublayers.Block):
    """Causal self-attention, then attention over the encoder output, then the FFN, each
    inside a residual connection with LayerNorm.

    Takes the same `BlockConfig` as `EncoderBlock`. Two ways to run it:
      * `call`: all target positions at once (teacher forcing), with a causal
        `self_attention_mask` [1, T, T] (`masks.causal_mask`).
      * `call_with_cache`: one position at a time, reusing the keys and values of earlier
        positions from a growing cache and the projected encoder output
        (`project_memory`), which gives the same outputs as `call` at that position.

    `memory_mask` is bool [B, 1, S], True on real source tokens (`masks.key_padding_mask`).
    """

    def build(self, input_shape):
        super().build(input_shape)  # self-attention and FFN first: the order of get_weights() since the first version
        config, dtype = self.config, self.dtype_policy
        self.cross_attention = sublayers.attention(config, "cross_attention", dtype)
        self.cross_attention.build(input_shape, input_shape)
        self.cross_attention_residual = sublayers.residual(config, "cross_attention_residual", input_shape, dtype)

    def call(self, inputs, memory, self_attention_mask=None, memory_mask=None, training=None, return_attention_scores=False):
        """Outputs [B, T, d]; with `return_attention_scores`, (outputs, {"self": [B, h, T, T],
        "encoder_decoder": [B, h, T, S]})."""
        x = self.self_attention_residual.prepare(inputs)
        x, self_weights = self.self_attention(x, attention_mask=self_attention_mask, training=training, return_attention_scores=True)
        x = self.self_attention_residual.finish(inputs, x, training)
        memory_keys, memory_values = self.project_memory(memory)
        outputs, cross_weights = self._cross_attention_and_feed_forward(x, memory_keys, memory_values, memory_mask, training)
        if return_attention_scores:
            return outputs, {"self": self_weights, "encoder_decoder": cross_weights}
        return outputs

    def project_memory(self, memory):
        """The encoder output's cross-attention keys and values, computed once per sentence."""
        return self.cross_attention.project_memory(memory)

    def call_with_cache(self, inputs, memory_keys, memory_values, memory_mask, key_cache, value_cache,
                        native_attention: bool = False):
        """One decoding step: `inputs` [N, d] (one position per hypothesis) at the position
        after those in the caches; N = B * K hypotheses of the memory's B sentences;
        `native_attention`: both attentions as one native kernel each (decoding in this process).

        Returns:
          (outputs [N, d], key_cache, value_cache), the caches one position longer
        """
        x = self.self_attention_residual.prepare(inputs)
        x, key_cache, value_cache = self.self_attention.call_with_cache(x, key_cache, value_cache, native_attention)
        x = self.self_attention_residual.finish(inputs, x, training=False)
        outputs, _ = self._cross_attention_and_feed_forward(x, memory_keys, memory_values, memory_mask, False,
                                                            native_attention)
        return outputs, key_cache, value_cache

    def _cross_attention_and_feed_forward(self, x, memory_keys, memory_values, memory_mask, training,
                                          native_attention: bool = False):
        """(outputs, cross-attention weights; None with `native_attention`)."""
        y = self.cross_attention_residual.prepare(x)
        y, weights = self.cross_attention.attend(
            y, memory_keys, memory_values, memory_mask, training=training, return_attention_scores=True,
            native_step=native_attention,
        )
        x = self.cross_attention_residual.finish(x, y, training)
        y = self.feed_forward(self.feed_forward_residual.prepare(x), training=training)
        return self.feed_forward_residual.finish(x, y, training), weights

"""Multi-head scaled dot-product attention, with a growing key/value cache for decoding."""

import keras
import tensorflow as tf
from keras import ops

from t2t_keras.kernels.attention_step import attention_step
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout

MASKED_LOGIT = -1.0e9  # added to the logits of masked keys: exp() underflows to exactly 0


@keras.saving.register_keras_serializable(package="t2t_keras")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k)) V over `num_heads` heads, then W^O (section 3.2).

    Projections have no biases, as in the paper's equations. The attention softmax runs in
    float32 whatever the compute dtype, and masked logits are pushed down by a finite 1e9,
    so a fully masked row never yields NaN.

    Args:
      num_heads: h.
      key_depth: d_k, per head (queries and keys).
      value_depth: d_v, per head.
      output_dim: size of W^O's output; default: the query's last dimension.
      dropout: rate of dropout on the attention weights (a tensor2tensor extra).

    Masks are boolean, True = attend, broadcastable to [batch, queries, keys].

    Incremental decoding keeps the keys and values of the positions fed so far in caches
    `[batch, num_heads, length, depth]` that start empty (`init_cache`) and grow by one
    position per `call_with_cache`, so a step costs what the prefix costs, not what the
    longest allowed output would.
    Cross-attention projects the encoder output once (`project_memory`) and then calls
    `attend` at every step, with the queries of all beams of a sentence against one copy.

    Example:
      attention = MultiHeadAttention(num_heads=8, key_depth=64, value_depth=64)
      y = attention(x, memory=x, attention_mask=mask)   # self-attention

    Reference: Vaswani et al., 2017, "Attention Is All You Need", section 3.2.
    """

    def __init__(self, num_heads, key_depth, value_depth, output_dim=None, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("num_heads", num_heads), ("key_depth", key_depth), ("value_depth", value_depth)):
            if int(value) <= 0:
                raise ValueError(f"MultiHeadAttention: {name} must be positive, got {value}.")
        self.num_heads = int(num_heads)
        self.key_depth = int(key_depth)
        self.value_depth = int(value_depth)
        self.output_dim = output_dim
        self.dropout = float(dropout)

    def build(self, query_shape, memory_shape=None):
        query_dim = query_shape[-1]
        memory_dim = query_dim if memory_shape is None else memory_shape[-1]
        output_dim = self.output_dim or query_dim

        def projection(name, units, input_dim):
            # Plain Dense over all heads at once: on TF's CPU kernels this runs several times
            # faster than keras.layers.EinsumDense with a [d, h, depth] kernel.
            layer = Dense(
                units, use_bias=False, kernel_initializer="glorot_uniform", dtype=self.dtype_policy, name=name
            )
            layer.build((None, None, input_dim))
            return layer

        self.query_dense = projection("query", self.num_heads * self.key_depth, query_dim)
        self.key_dense = projection("key", self.num_heads * self.key_depth, memory_dim)
        self.value_dense = projection("value", self.num_heads * self.value_depth, memory_dim)
        self.output_dense = projection("output", output_dim, self.num_heads * self.value_depth)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, query, memory=None, attention_mask=None, training=None, return_attention_scores=False):
        """Attention of `query` [B, Lq, d] over `memory` [B, Lk, d] (default: query itself).

        With `return_attention_scores`, returns (output, weights [B, h, Lq, Lk]).
        """
        keys, values = self.project_memory(query if memory is None else memory)
        return self.attend(query, keys, values, attention_mask, training, return_attention_scores)

    def project_memory(self, memory):
        """Keys [B, h, L, d_k] and values [B, h, L, d_v] of `memory` [B, L, d]."""
        return (
            self._split_heads(self.key_dense(memory), self.key_depth),
            self._split_heads(self.value_dense(memory), self.value_depth),
        )

    def attend(self, query, keys, values, attention_mask=None, training=None, return_attention_scores=False,
               native_step: bool = False):
        """Attention of `query` [N, Lq, d] over projected keys and values [B, h, Lk, depth].

        N is B, or B * K for beam search: the K hypotheses of each sentence (rows b * K ..
        b * K + K - 1) attend over that sentence's memory, as K * Lq queries of one row, so
        the encoder output is neither copied per beam nor read once per hypothesis. Then the
        mask is [B, 1, Lk] and the weights [B, h, K * Lq, Lk]. A decoding step's `query` may
        be [N, d] (one position; the output is [N, d] too), and with `native_step` its
        attention runs as one native kernel (`kernels/attention_step.py`; no weights returned).
        """
        queries = self._split_heads(self.query_dense(query), self.key_depth, ops.shape(keys)[0])
        return self._attention(query, queries, keys, values, attention_mask, training, return_attention_scores,
                               native_step)

    def _attention(self, query, queries, keys, values, attention_mask, training, return_attention_scores,
                   native_step: bool = False):
        """softmax(Q K^T / sqrt(d_k)) V, then W^O, for `queries` [B, h, K * Lq, d_k] of `query`."""
        queries = queries * ops.cast(self.key_depth**-0.5, queries.dtype)
        if native_step:  # a decoding step in this process: the same values, without the graph's per-shape kernels
            bias = None if attention_mask is None else tf.where(tf.cast(attention_mask[:, 0, :], tf.bool), 0.0, MASKED_LOGIT)
            context = attention_step(queries, keys, values, bias)  # [B, K * Lq, h, d_v]
            outputs = self.output_dense(ops.reshape(context, (*ops.shape(query)[:-1], self.num_heads * self.value_depth)))
            return (outputs, None) if return_attention_scores else outputs
        # transpose_b instead of a transposed copy of the keys (a growing cache at every step).
        logits = ops.cast(tf.matmul(queries, keys, transpose_b=True), "float32")  # [B, h, K * Lq, Lk]
        if attention_mask is not None:
            # An additive bias on the (small, broadcast) mask is cheaper than a select over the
            # logits, forward and backward. Outside training it is first broadcast to the
            # logits' shape: oneDNN fuses the product and a broadcast add of a graph-made mask
            # into one op that took 100x the time of both (300 ms for a causal mask of 30
            # positions at 128 x 4 heads, a teacher-forced pass of scoring, log_probs,
            # alignments, a SavedModel's serving_default: docs/results/decoding_speed.md, "Scoring").
            mask = ops.expand_dims(ops.cast(attention_mask, "bool"), axis=1)  # [B, 1, Lq or 1, Lk]
            bias = ops.where(mask, 0.0, MASKED_LOGIT)
            logits = logits + (bias if training else tf.broadcast_to(bias, tf.shape(logits)))
        weights = ops.cast(tf.nn.softmax(logits, axis=-1), self.compute_dtype)
        context = ops.matmul(self.dropout_layer(weights, training=training), values)  # [B, h, K * Lq, d_v]
        if context.shape[2] != 1:  # with one query per row, moving heads before it is a reshape
            context = ops.transpose(context, (0, 2, 1, 3))
        context = ops.reshape(context, (*ops.shape(query)[:-1], self.num_heads * self.value_depth))
        outputs = self.output_dense(context)
        return (outputs, weights) if return_attention_scores else outputs

    def _split_heads(self, projected, depth, batch_size=None):
        """[N, L, h * depth] (or [N, h * depth]) -> [B, h, N / B * L, depth] (B: default N)."""
        rows = ops.shape(projected)[0]
        length = ops.shape(projected)[1] if len(projected.shape) == 3 else 1
        if batch_size is None:
            batch_size = rows
        else:
            # The length is spelled out (reshape cannot infer a -1 from an empty batch), with
            # N / B rows per sentence taken as 1 when both are 0.
            length = length * (ops.maximum(rows, 1) // ops.maximum(batch_size, 1))
        return ops.transpose(ops.reshape(projected, (batch_size, length, self.num_heads, depth)), (0, 2, 1, 3))

    def init_cache(self, batch_size):
        """Empty key and value caches [B, h, 0, d_k] and [B, h, 0, d_v]."""
        keys = ops.zeros((batch_size, self.num_heads, 0, self.key_depth), self.compute_dtype)
        values = ops.zeros((batch_size, self.num_heads, 0, self.value_depth), self.compute_dtype)
        return keys, values

    def call_with_cache(self, query, key_cache, value_cache, native_step: bool = False):
        """Self-attention of the step `query` [N, d], the position after those cached.

        Appends the step's key and value to the caches and attends over all of them: every
        cached position precedes the query, so no mask is needed. Rank-2 tensors throughout:
        at one position per row, splitting heads is a reshape, and TensorFlow runs plain
        matmuls without the shape arithmetic of [N, 1, d] products. `native_step`: the
        attention as one native kernel (`attend`).

        Returns:
          (output [N, d], key_cache [N, h, t + 1, d_k], value_cache [N, h, t + 1, d_v])
        """
        one_position = lambda projected, depth: ops.reshape(projected, (-1, self.num_heads, 1, depth))  # noqa: E731
        step_keys = one_position(self.key_dense(query), self.key_depth)
        step_values = one_position(self.value_dense(query), self.value_depth)
        key_cache = ops.concatenate([key_cache, ops.cast(step_keys, key_cache.dtype)], axis=2)
        value_cache = ops.concatenate([value_cache, ops.cast(step_values, value_cache.dtype)], axis=2)
        queries = one_position(self.query_dense(query), self.key_depth)
        outputs = self._attention(query, queries, key_cache, value_cache, None, False, False, native_step)
        return outputs, key_cache, value_cache

    def compute_output_shape(self, query_shape, memory_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_depth=self.key_depth,
            value_depth=self.value_depth,
            output_dim=self.output_dim,
            dropout=self.dropout,
        )
        return config

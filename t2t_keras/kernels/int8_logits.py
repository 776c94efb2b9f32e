"""A decode step's output product in int8 (kernels/native/int8_logits.cc), as CTranslate2's int8
decoding: each output token's weights quantised to int8 by their absolute maximum once per
search (`quantized_output_weights`), each row of the step's states by its own at every step,
the products summed in int32 (AVX-512 VNNI) and scaled back to logits in the states' dtype.

    weights = quantized_output_weights(table, vocabulary)  # [V, d]; [G, U] a shortlist's groups, or None: all
    logits = int8_logits(states, weights, group_rows)      # [N, d] -> [N, U], the states' dtype
"""

from typing import NamedTuple

import tensorflow as tf

from t2t_keras.kernels import native


class QuantizedOutputWeights(NamedTuple):
    packed: tf.Tensor  # int8 [G, ceil(U / 16), d / 4, 64]: each block of 16 tokens, 4 depths at a time
    scales: tf.Tensor  # float32 [G, U]: each token's max |weight| / 127
    sums: tf.Tensor  # int32 [G, U]: 128 x each token's int8 weight sum (the rows are stored as q + 128)


def quantized_output_weights(table, vocabulary=None) -> QuantizedOutputWeights:
    """The rows of `vocabulary` [G, U] (None: all, one group) of the output table [V, d] (d a
    multiple of 4) quantised and packed for `int8_logits`, in one pass. Needs `native.library()`."""
    if vocabulary is None:
        vocabulary = tf.range(tf.shape(table)[0])[None, :]
    return QuantizedOutputWeights(*native.library().t2t_pack_int8_weights(table, vocabulary))


def int8_logits(states, weights: QuantizedOutputWeights, group_rows=None):
    """Logits [N, U] of states [N, d] (float32 or bfloat16: the logits' dtype) against `weights`: rows in
    groups of `group_rows` [G] in order, each against its group's tokens (None: one group of
    all N rows). Needs `native.library()`."""
    if group_rows is None:
        group_rows = tf.shape(states)[:1]
    return native.library().t2t_int8_logits(states, weights.packed, weights.scales, weights.sums, group_rows)

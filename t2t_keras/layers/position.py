"""Position information added to the embeddings at the bottom of both stacks (section 3.5)."""

import math

import keras
import numpy as np
from keras import ops

from t2t_keras.layers.dense import Dense
from t2t_keras.token_ids import START_ID


def sinusoids(positions, depth: int, max_wavelength: float = 10000.0):
    """The paper's encoding of integer `positions` [...] -> float32 [..., depth]: sin and cos
    of position / max_wavelength^(2i/depth), interleaved."""
    pair_index = ops.arange((depth + 1) // 2, dtype="float32")  # i in the formula
    inverse_frequency = ops.exp(-math.log(max_wavelength) * 2.0 * pair_index / depth)
    angles = ops.expand_dims(ops.cast(positions, "float32"), -1) * inverse_frequency  # [..., ceil(d/2)]
    interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # [..., ceil(d/2), 2]
    return ops.reshape(interleaved, (*ops.shape(positions), -1))[..., :depth]


@keras.saving.register_keras_serializable(package="t2t_keras")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Sines and cosines interleave exactly as in the paper's formula (tensor2tensor
    concatenates them instead). No weights.

    Args:
      max_wavelength: the 10000 of the formula.

    Call arguments:
      inputs: [B, L, d] embeddings; only the shape and dtype are used.
      start_index: position of the first element (the step index while decoding).

    Returns [1, L, d] encodings, to be added to the embeddings.
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = float(max_wavelength)

    def call(self, inputs, start_index=0):
        positions = ops.arange(ops.shape(inputs)[1]) + start_index
        return ops.cast(sinusoids(positions, inputs.shape[-1], self.max_wavelength)[None], self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (1, input_shape[1], input_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update(max_wavelength=self.max_wavelength)
        return config


@keras.saving.register_keras_serializable(package="t2t_keras")
class CopyPositionEncoding(keras.layers.Layer):
    """Where in the source the next copied token comes from, for targets that copy their source
    in order with other tokens between the copies (a parsing tree's words between its brackets).

    The copy position of a decoder input is the number of copied tokens fed up to and including
    it, which is the source index of the next token to copy; its sinusoid (the source's own
    position encoding) goes through a learned projection. Without it the decoder has to find
    its place in the source by content, and loses it where words repeat ("in the demand ... in
    the market segments in which ..."): docs/log/2026-11-22_to_2026-12-03.md, "What p6 gets wrong".

    Args:
      structure_tokens: target ids that are not copies (they do not advance the position).
      vocab_size: the target vocabulary size.

    Call arguments:
      ids: decoder input ids [B, T].
      copied_before: copied tokens fed before ids[:, 0], [B] (incremental decoding); default 0.

    Returns (encodings [B, T, d] to add to the decoder inputs, copied tokens fed up to the last
    position [B]).
    """

    def __init__(self, structure_tokens, vocab_size, **kwargs):
        super().__init__(**kwargs)
        self.structure_tokens = tuple(sorted(int(token) for token in structure_tokens))
        self.vocab_size = int(vocab_size)
        self.is_copy = np.ones(self.vocab_size, np.int32)
        self.is_copy[[*self.structure_tokens, START_ID]] = 0  # the start symbol copies nothing either

    def build(self, input_shape):
        self.hidden_size = int(input_shape[-1])
        self.projection = Dense(self.hidden_size, use_bias=False, dtype=self.dtype_policy, name="projection")
        self.projection.build((None, None, self.hidden_size))

    def call(self, ids, copied_before=None):
        copied = ops.cumsum(ops.take(ops.convert_to_tensor(self.is_copy), ops.cast(ids, "int32"), axis=0), axis=1)
        if copied_before is not None:
            copied = copied + ops.expand_dims(copied_before, 1)
        encodings = self.projection(ops.cast(sinusoids(copied, self.hidden_size), self.compute_dtype))
        return encodings, copied[:, -1]

    def get_config(self):
        config = super().get_config()
        config.update(structure_tokens=list(self.structure_tokens), vocab_size=self.vocab_size)
        return config


@keras.saving.register_keras_serializable(package="t2t_keras")
class LearnedPositionEmbedding(keras.layers.Layer):
    """A learned [max_length, d] table of positions (Table 3 row E).

    Args:
      max_length: positions the table holds; longer inputs (or decoding past it) are an
        error on CPU and read zeros on GPU, so size it for the longest decode.
      initializer: of the table.

    Call arguments and return value as `SinusoidalPositionEncoding`.
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = int(max_length)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.position_table = self.add_weight(
            name="position_table", shape=(self.max_length, input_shape[-1]), initializer=self.initializer
        )

    def call(self, inputs, start_index=0):
        positions = ops.arange(ops.shape(inputs)[1]) + start_index
        return ops.cast(ops.take(self.position_table, positions, axis=0)[None], self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (1, input_shape[1], input_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length, initializer=keras.initializers.serialize(self.initializer))
        return config

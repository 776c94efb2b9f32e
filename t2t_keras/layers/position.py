"""Position information added to the embeddings at the bottom of both stacks (section 3.5)."""

import math

import keras
from keras import ops


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
        length, depth = ops.shape(inputs)[1], inputs.shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        pair_index = ops.arange((depth + 1) // 2, dtype="float32")  # i in the formula
        inverse_frequency = ops.exp(-math.log(self.max_wavelength) * 2.0 * pair_index / depth)
        angles = positions[:, None] * inverse_frequency[None, :]  # [L, ceil(d/2)]
        interleaved = ops.reshape(ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1), (length, -1))
        return ops.cast(interleaved[None, :, :depth], self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (1, input_shape[1], input_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update(max_wavelength=self.max_wavelength)
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

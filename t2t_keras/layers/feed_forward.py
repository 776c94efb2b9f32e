"""The position-wise feed-forward network (section 3.3)."""

import keras

from t2t_keras.layers.dense import Dense
from t2t_keras.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="t2t_keras")
class FeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to every position alike.

    Args:
      filter_size: d_ff, the inner size.
      dropout: rate of dropout on the ReLU output (tensor2tensor's relu_dropout; the paper
        has none).
    """

    def __init__(self, filter_size, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if int(filter_size) <= 0:
            raise ValueError(f"FeedForward: filter_size must be positive, got {filter_size}.")
        self.filter_size = int(filter_size)
        self.dropout = float(dropout)

    def build(self, input_shape):
        self.inner_dense = Dense(
            self.filter_size, activation="relu", dtype=self.dtype_policy, name="inner"
        )
        self.inner_dense.build(input_shape)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = Dense(input_shape[-1], dtype=self.dtype_policy, name="output")
        self.output_dense.build((*input_shape[:-1], self.filter_size))

    def call(self, inputs, training=None):
        return self.output_dense(self.dropout_layer(self.inner_dense(inputs), training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(filter_size=self.filter_size, dropout=self.dropout)
        return config

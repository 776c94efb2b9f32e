"""The residual connection around every sub-layer, post-norm (paper) or pre-norm (t2t)."""

import keras

from t2t_keras.layers.block_config import NORM_TYPES
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.normalization import LayerNorm


@keras.saving.register_keras_serializable(package="t2t_keras")
class ResidualNorm(keras.layers.Layer):
    """Wraps a sub-layer f: post-norm LayerNorm(x + Dropout(f(x))), pre-norm x + Dropout(f(LayerNorm(x))).

    Use as `residual.finish(x, f(residual.prepare(x)), training)`: `prepare` normalises the
    sub-layer input only for pre-norm, `finish` adds the dropped-out sub-layer output and
    normalises only for post-norm (section 5.4: dropout before the residual add).

    Args:
      norm_type: "post" (as published) or "pre".
      dropout: P_drop.
      epsilon: of the LayerNorm.
    """

    def __init__(self, norm_type="post", dropout=0.0, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        if norm_type not in NORM_TYPES:
            raise ValueError(f"ResidualNorm: norm_type must be one of {NORM_TYPES}, got {norm_type!r}.")
        self.norm_type = norm_type
        self.dropout = float(dropout)
        self.epsilon = float(epsilon)

    def build(self, input_shape):
        self.layer_norm = LayerNorm(
            epsilon=self.epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build(input_shape)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    def prepare(self, inputs):
        """The sub-layer's input: normalised for pre-norm, unchanged for post-norm."""
        return self.layer_norm(inputs) if self.norm_type == "pre" else inputs

    def finish(self, inputs, sublayer_outputs, training=None):
        """The block's output after the sub-layer. Post-norm in training with the native layer
        norm: the dropout, the add and the layer norm in one native kernel each way, with the
        dropout's own random bits (the same units dropped)."""
        if self.norm_type == "post" and self.layer_norm.runs_native(inputs, training):
            drawn = self.dropout_layer.random_bits(sublayer_outputs, training)
            if drawn is not None:
                return self.layer_norm.of_dropped_sum(inputs, sublayer_outputs, *drawn)
        outputs = inputs + self.dropout_layer(sublayer_outputs, training=training)
        return self.layer_norm(outputs) if self.norm_type == "post" else outputs

    def call(self, inputs, sublayer_outputs, training=None):
        return self.finish(inputs, sublayer_outputs, training)

    def compute_output_shape(self, input_shape, sublayer_outputs_shape=None):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(norm_type=self.norm_type, dropout=self.dropout, epsilon=self.epsilon)
        return config

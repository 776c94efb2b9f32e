"""LayerNorm: Keras' LayerNormalization computed by `kernels.layer_norm`."""

import keras
import tensorflow as tf

from t2t_keras.kernels.layer_norm import IMPLEMENTATIONS, layer_norm, native_dropout_add_layer_norm, native_layer_norm


@keras.saving.register_keras_serializable(package="t2t_keras")
class LayerNorm(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis (same weights, config and
    checkpoints), computed in float32 by `layer_norm`: forward and backward in about half
    the TensorFlow ops that differentiating Keras's formula takes
    (docs/results/training_speed.md, "Hand-written kernels"). Any other axis, rms_scaling
    or a missing gamma or beta falls back to Keras's computation.

    `implementation` "native" (set by training/kernel_choices.py where it was timed faster)
    takes the training step's forward and backward through one native kernel each
    (`native_layer_norm`); inference always runs TensorFlow's ops, so that exported graphs
    need nothing but TensorFlow."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.implementation = "graph"  # of the training step; chosen per machine by training.kernel_choices

    def runs_native(self, inputs, training) -> bool:
        """Whether the native kernels run here: training, chosen, on a float32 or bfloat16 input."""
        return bool(training) and self.implementation == "native" and inputs.dtype in (tf.float32, tf.bfloat16) \
            and self.axis in (-1, [-1], [len(inputs.shape) - 1]) and not self.rms_scaling and self.center and self.scale

    def of_dropped_sum(self, inputs, sublayer_outputs, bits, threshold):
        """self(inputs + dropout(sublayer_outputs)) in training, the dropout's mask given by its
        random bits (`Dropout.random_bits`), by one native kernel each way. Where
        `runs_native`."""
        outputs = native_dropout_add_layer_norm(inputs, sublayer_outputs, bits, threshold, tf.cast(self.gamma, tf.float32),
                                                tf.cast(self.beta, tf.float32), self.epsilon)
        return tf.cast(outputs, self.compute_dtype)

    def call(self, inputs, training=None):
        """`training`: with the hand-written gradient (a train step); else Keras's own gradient
        of the same ops (inference graphs hold no custom-gradient op)."""
        if self.axis not in (-1, [-1], [len(inputs.shape) - 1]) or self.rms_scaling or not (self.center and self.scale):
            return super().call(inputs)
        if self.implementation not in IMPLEMENTATIONS:
            raise ValueError(f"LayerNorm: implementation must be one of {', '.join(IMPLEMENTATIONS)}, got {self.implementation!r}.")
        gamma, beta = tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32)
        if self.runs_native(inputs, training):
            return tf.cast(native_layer_norm(inputs, gamma, beta, self.epsilon), self.compute_dtype)
        outputs = layer_norm(tf.cast(inputs, tf.float32), gamma, beta, self.epsilon, hand_written_gradient=bool(training))
        return tf.cast(outputs, self.compute_dtype)

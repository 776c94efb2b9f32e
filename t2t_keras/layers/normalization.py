"""LayerNorm: Keras' LayerNormalization computed by `kernels.layer_norm`."""

import keras
import tensorflow as tf

from t2t_keras.kernels.layer_norm import layer_norm


@keras.saving.register_keras_serializable(package="t2t_keras")
class LayerNorm(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis (same weights, config and
    checkpoints), computed in float32 by `layer_norm`: forward and backward in about half
    the TensorFlow ops that differentiating Keras's formula takes
    (docs/results/training_speed.md, "Hand-written kernels"). Any other axis, rms_scaling
    or a missing gamma or beta falls back to Keras's computation."""

    def call(self, inputs, training=None):
        """`training`: with the hand-written gradient (a train step); else Keras's own gradient
        of the same ops (inference graphs hold no custom-gradient op)."""
        if self.axis not in (-1, [-1], [len(inputs.shape) - 1]) or self.rms_scaling or not (self.center and self.scale):
            return super().call(inputs)
        outputs = layer_norm(tf.cast(inputs, tf.float32), tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32),
                             self.epsilon, hand_written_gradient=bool(training))
        return tf.cast(outputs, self.compute_dtype)

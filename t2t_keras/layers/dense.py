"""Dense: Keras' Dense whose kernel product is `kernels.matmul`."""

import keras
import tensorflow as tf
from keras import ops

from t2t_keras.kernels.bias_relu import IMPLEMENTATIONS, native_bias_relu
from t2t_keras.kernels.matmul import matmul


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dense(keras.layers.Dense):
    """keras.layers.Dense (same weights, config and checkpoints) with the kernel product
    computed by `matmul`, its hand-written gradient in training only. Quantized layers take
    Keras's own path (Keras dispatches them before `call`); a LoRA kernel is read through
    `self.kernel` as Keras does.

    `implementation` "native" (set by training/kernel_choices.py where it was timed faster)
    takes a ReLU layer's bias add and activation in the training step through one native
    kernel each way (`native_bias_relu`); inference always runs TensorFlow's ops."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.implementation = "graph"  # of a ReLU layer's training step; chosen per machine by training.kernel_choices

    def call(self, inputs, training=None):
        if self.implementation not in IMPLEMENTATIONS:
            raise ValueError(f"Dense: implementation must be one of {', '.join(IMPLEMENTATIONS)}, got {self.implementation!r}.")
        outputs = matmul(inputs, ops.cast(self.kernel, self.compute_dtype), hand_written_gradient=bool(training))
        if self.runs_native(outputs, training):
            return native_bias_relu(outputs, tf.cast(self.bias, tf.float32))
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def runs_native(self, outputs, training) -> bool:
        """Whether the native bias + ReLU runs: training, chosen, a ReLU layer with a bias, float32
        or bfloat16 outputs."""
        return bool(training) and self.implementation == "native" and self.bias is not None \
            and self.activation is keras.activations.relu and outputs.dtype in (tf.float32, tf.bfloat16)

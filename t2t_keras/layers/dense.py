"""Dense: Keras' Dense whose kernel product is `kernels.matmul`."""

import keras
from keras import ops

from t2t_keras.kernels.matmul import matmul


@keras.saving.register_keras_serializable(package="t2t_keras")
class Dense(keras.layers.Dense):
    """keras.layers.Dense (same weights, config and checkpoints) with the kernel product
    computed by `matmul`, its hand-written gradient in training only. Quantized layers take
    Keras's own path (Keras dispatches them before `call`); a LoRA kernel is read through
    `self.kernel` as Keras does."""

    def call(self, inputs, training=None):
        outputs = matmul(inputs, ops.cast(self.kernel, self.compute_dtype), hand_written_gradient=bool(training))
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

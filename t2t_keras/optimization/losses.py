"""Label-smoothed cross-entropy over real (non-padding) target tokens (section 5.4): as
functions for the trainer's step, and as a Keras loss for `compile()` / `fit()`."""

import keras
from keras import ops

from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy
from t2t_keras.token_ids import PAD_ID


def loss_sum_and_weight(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """(sum of per-token losses over real tokens, number of real tokens), both float32.

    Kept apart so that a distributed or accumulated step can divide by the global number
    of target tokens instead of averaging per-replica means.
    """
    return real_token_sum(targets, smoothed_cross_entropy(targets, logits, label_smoothing), pad_id)


def real_tokens(targets, pad_id: int = PAD_ID):
    """float32 [B, T]: 1 on the real target tokens, 0 on padding: what every loss and metric
    of the package weighs its tokens by."""
    return ops.cast(ops.not_equal(targets, pad_id), "float32")


def real_token_sum(targets, token_losses, pad_id: int = PAD_ID):
    """(sum of `token_losses` [B, T] over real target tokens, number of real tokens), float32."""
    weights = real_tokens(targets, pad_id)
    return ops.sum(token_losses * weights), ops.sum(weights)


def padded_cross_entropy(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """Mean smoothed cross-entropy per real target token (0 for an all-padding batch)."""
    total, weight = loss_sum_and_weight(targets, logits, label_smoothing, pad_id)
    return total / ops.maximum(weight, 1.0)


@keras.saving.register_keras_serializable(package="t2t_keras")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """The paper's training loss as a Keras loss: `padded_cross_entropy(y_true, y_pred,
    label_smoothing)` for target ids y_true [B, T] (0 = padding) and logits y_pred [B, T, V].

    Padding is masked by making it weight 0 (times any `sample_weight` given), and the
    default reduction divides by the sum of the weights: the mean per real target token, as
    the trainer's loss. Under a tf.distribute strategy, Keras' `fit` averages the replicas'
    means (the trainer divides every replica's sum by the global token count instead).
    """

    def __init__(self, label_smoothing: float = 0.1, name: str = "label_smoothed_cross_entropy",
                 reduction: str = "mean_with_sample_weight", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.label_smoothing = float(label_smoothing)

    def __call__(self, y_true, y_pred, sample_weight=None):
        weights = real_tokens(y_true)
        if sample_weight is not None:
            weights *= ops.cast(sample_weight, "float32")
        return super().__call__(y_true, y_pred, weights)

    def call(self, y_true, y_pred):
        return smoothed_cross_entropy(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}

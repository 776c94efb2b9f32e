"""Label-smoothed cross-entropy over real (non-padding) target tokens (section 5.4)."""

from keras import ops

from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy
from t2t_keras.token_ids import PAD_ID


def loss_sum_and_weight(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """(sum of per-token losses over real tokens, number of real tokens), both float32.

    Kept apart so that a distributed or accumulated step can divide by the global number
    of target tokens instead of averaging per-replica means.
    """
    return real_token_sum(targets, smoothed_cross_entropy(targets, logits, label_smoothing), pad_id)


def real_token_sum(targets, token_losses, pad_id: int = PAD_ID):
    """(sum of `token_losses` [B, T] over real target tokens, number of real tokens), float32."""
    weights = ops.cast(ops.not_equal(targets, pad_id), "float32")
    return ops.sum(token_losses * weights), ops.sum(weights)


def padded_cross_entropy(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """Mean smoothed cross-entropy per real target token (0 for an all-padding batch)."""
    total, weight = loss_sum_and_weight(targets, logits, label_smoothing, pad_id)
    return total / ops.maximum(weight, 1.0)

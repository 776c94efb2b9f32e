"""Label-smoothed cross-entropy over real (non-padding) target tokens (section 5.4)."""

import tensorflow as tf
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


def rdrop_token_losses(targets, logits, label_smoothing: float, alpha: float):
    """R-Drop's per-token loss [2B, T] (float32) of a batch run twice: `targets` [2B, T] and
    `logits` [2B, T, V] hold each sentence in rows b and b + B, with independent dropout.

    Row b's loss is its smoothed cross-entropy plus alpha / 2 * KL(p_b || p_{b+B}) (and the
    same for row b + B against row b), so a real token's two rows together add alpha times
    half the symmetric KL, as fairseq's R-Drop criterion does. Liang et al., 2021, "R-Drop:
    Regularized Dropout for Neural Networks".
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    partner = tf.roll(log_probs, shift=tf.shape(log_probs)[0] // 2, axis=0)  # row b <-> row b + B
    divergence = tf.reduce_sum(tf.exp(log_probs) * (log_probs - partner), axis=-1)
    return smoothed_cross_entropy(targets, logits, label_smoothing) + 0.5 * alpha * divergence


def padded_cross_entropy(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """Mean smoothed cross-entropy per real target token (0 for an all-padding batch)."""
    total, weight = loss_sum_and_weight(targets, logits, label_smoothing, pad_id)
    return total / ops.maximum(weight, 1.0)

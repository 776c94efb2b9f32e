"""Label-smoothed cross-entropy over real (non-padding) target tokens (section 5.4)."""

from keras import ops

from t2t_keras.layers.masks import PAD_ID


def smoothed_cross_entropy(targets, logits, label_smoothing: float):
    """Per-token cross-entropy against the smoothed target distribution, [B, T] float32.

    The smoothed distribution puts 1 - eps on the true token and eps / (V - 1) on each of
    the other V - 1 tokens (tensor2tensor's convention), so

        loss = -(1 - eps) log p_y - eps / (V - 1) * sum_{v != y} log p_v.

    With eps = 0 this is the negative log-likelihood.
    """
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    vocab_size = ops.shape(logits)[-1]
    true_log_prob = ops.take_along_axis(log_probs, ops.cast(targets, "int32")[..., None], axis=-1)[..., 0]
    if not label_smoothing:
        return -true_log_prob
    others = ops.sum(log_probs, axis=-1) - true_log_prob
    off_weight = label_smoothing / ops.cast(vocab_size - 1, "float32")
    return -(1.0 - label_smoothing) * true_log_prob - off_weight * others


def loss_sum_and_weight(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """(sum of per-token losses over real tokens, number of real tokens), both float32.

    Kept apart so that a distributed or accumulated step can divide by the global number
    of target tokens instead of averaging per-replica means.
    """
    weights = ops.cast(ops.not_equal(targets, pad_id), "float32")
    losses = smoothed_cross_entropy(targets, logits, label_smoothing)
    return ops.sum(losses * weights), ops.sum(weights)


def padded_cross_entropy(targets, logits, label_smoothing: float, pad_id: int = PAD_ID):
    """Mean smoothed cross-entropy per real target token (0 for an all-padding batch)."""
    total, weight = loss_sum_and_weight(targets, logits, label_smoothing, pad_id)
    return total / ops.maximum(weight, 1.0)

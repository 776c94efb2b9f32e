"""The softmax normaliser of logit rows, shared by the training loss and beam search."""

import tensorflow as tf


def log_normalizers_at(logits, most_likely):
    """log sum_v exp(logits[n, v]) for each row n of [N, V] logits, as logit - log softmax at
    the row's most likely token `most_likely` [N] (its probability is at least 1 / V, so the
    logarithm never underflows). Returns it with the softmax [N, V] it was read from.

    One softmax kernel: faster on CPU than TensorFlow's log_softmax or reduce_logsumexp at a
    decoding step's shape, and than its fused cross-entropy at training shapes
    (docs/results/training_speed.md, "Hand-written kernels").
    """
    probs = tf.nn.softmax(logits)
    normalizers = tf.gather(logits, most_likely, batch_dims=1) - tf.math.log(tf.gather(probs, most_likely, batch_dims=1))
    return normalizers, probs

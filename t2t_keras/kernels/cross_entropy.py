"""Label-smoothed cross-entropy of logit rows from one softmax, its gradient written out."""

import tensorflow as tf

from t2t_keras.kernels.softmax import log_normalizers_at


def smoothed_cross_entropy(targets, logits, label_smoothing: float):
    """Per-token cross-entropy against the smoothed target distribution, [B, T] float32.

    The smoothed distribution puts 1 - eps on the true token and eps / (V - 1) on each of
    the other V - 1 tokens (tensor2tensor's convention), so

        loss = -(1 - eps) log p_y - eps / (V - 1) * sum_{v != y} log p_v
             = logsumexp(z) - (1 - eps - off) z_y - off * sum_v z_v,   off = eps / (V - 1),

    with the gradient softmax(z) - smoothed. Computed that way, from one softmax kernel and
    row reductions, instead of TensorFlow's fused softmax cross-entropy on a one-hot [B, T, V]
    label tensor: about 3x faster on CPU (docs/results/training_speed.md, "Hand-written kernels"), the output
    layer being most of a small model's step. With eps = 0 it is the negative
    log-likelihood.
    """
    logits = tf.cast(logits, tf.float32)
    targets = tf.cast(targets, tf.int32)
    vocab_size = tf.shape(logits)[-1]
    rows = tf.reshape(logits, [-1, vocab_size])
    losses = _row_cross_entropy(float(label_smoothing))(rows, tf.reshape(targets, [-1]))
    return tf.reshape(losses, tf.shape(targets))


def smoothing_weights(label_smoothing: float, vocab_size):
    """(off_value, on_weight) of the smoothed target distribution over `vocab_size` tokens:
    eps / (V - 1) on every token, and on the true one on_weight = 1 - eps - off_value more."""
    off_value = label_smoothing / tf.cast(vocab_size - 1, tf.float32)
    return off_value, 1.0 - label_smoothing - off_value


def _row_cross_entropy(label_smoothing: float):
    """(logits [N, V], targets [N]) -> smoothed cross-entropy [N], with its gradient written out."""

    @tf.custom_gradient
    def cross_entropy(logits, targets):
        rows, vocab_size = tf.shape(logits)[0], tf.shape(logits)[1]
        off_value, on_weight = smoothing_weights(label_smoothing, vocab_size)
        log_normalizers, probs = log_normalizers_at(logits, tf.argmax(logits, axis=-1, output_type=tf.int32))
        target_logits = tf.gather(logits, targets, batch_dims=1)
        losses = log_normalizers - on_weight * target_logits
        if label_smoothing:
            losses -= off_value * tf.reduce_sum(logits, axis=-1)

        def gradient(upstream):
            grads = (probs - off_value) * upstream[:, None] if label_smoothing else probs * upstream[:, None]
            target_cells = tf.stack([tf.range(rows), targets], axis=1)
            return tf.tensor_scatter_nd_sub(grads, target_cells, on_weight * upstream), None

        return losses, gradient

    return cross_entropy

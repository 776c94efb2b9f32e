import numpy as np
import tensorflow as tf

from t2t_keras.decoding.beam_search import NEG_INF
from t2t_keras.kernels.softmax import log_normalizers_at


def test_log_normalizers_equal_logsumexp_for_peaked_and_flat_rows():
    """logit - normalizer is the log-probability of every token (float64 logsumexp as the
    reference): on flat rows, on rows so peaked that most probabilities underflow to 0 in
    float32, and on rows a token filter masked to NEG_INF but for two tokens."""
    rng = np.random.default_rng(7)
    flat = rng.normal(size=(4, 8192))
    peaked = rng.normal(size=(4, 8192)) * 60.0
    masked = np.full((4, 8192), NEG_INF, np.float64)
    masked[:, [5, 9]] = [[0.0, -3.0]] * 4
    for rows in (flat, peaked, masked):
        rows32 = tf.constant(rows, tf.float32)
        normalizers = log_normalizers_at(rows32, tf.argmax(rows32, axis=-1, output_type=tf.int32))[0].numpy()
        rows64 = rows32.numpy().astype(np.float64)
        top = rows64.max(axis=1)
        expected = top + np.log(np.exp(rows64 - top[:, None]).sum(axis=1))
        np.testing.assert_allclose(normalizers, expected, rtol=1e-6, atol=1e-5)

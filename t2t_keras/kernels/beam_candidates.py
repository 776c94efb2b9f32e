"""Beam search's work over the vocabulary at a step: each hypothesis's best next tokens and
their log-probabilities, and the log-probability of EOS."""

import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.softmax import log_normalizers_at
from t2t_keras.kernels.timing import best_milliseconds
from t2t_keras.kernels.top_k import top_k_rows

NEG_INF = -1.0e9  # finite, so that sums and differences of masked scores never give NaN


def row_candidates(logits, k: int, eos_column, native_kernel: bool = False, column_mask=None):
    """(log_probs [N, k] float32, columns [N, k] int32, eos_log_probs [N] float32) of [N, V]
    logits: each row's k best columns as tf.math.top_k ranks its float32 logits (ties to the
    lower column), their log-probabilities, and the log-probability of column `eos_column`.
    With `column_mask` [S, V] bool (N = S * rows per sentence, in order), a row's logits are
    NEG_INF outside its sentence's columns, before they are normalised.

    With `native_kernel` (where `native.library()` loaded; never in a graph that is exported):
    one native kernel (kernels/native/beam_candidates.cc) that reads the logits in their own
    dtype, bfloat16 included, in place of a cast, a mask, a softmax and a top-k: the same
    columns, the log-probabilities equal to float32 rounding (its normaliser's sum runs in
    another order).
    """
    if native_kernel and native.library() is not None:
        no_mask = tf.zeros([0, 0], tf.bool)  # a constant: the kernel reads [0, any] as "no mask"
        log_probs, columns, eos_log_probs = native.library().t2t_beam_candidates(
            logits, eos_column, no_mask if column_mask is None else column_mask, k=k, masked_logit=NEG_INF)
        return log_probs, columns, eos_log_probs
    logits = masked_by_sentence(tf.cast(logits, tf.float32), column_mask)
    top_logits, columns = top_k_rows(logits, k)
    normalizers, _ = log_normalizers_at(logits, columns[:, 0])
    return top_logits - normalizers[:, None], columns, logits[:, eos_column] - normalizers


def masked_by_sentence(logits, column_mask):
    """[N, V] logits NEG_INF outside each row's sentence's columns (`column_mask` [S, V] bool,
    N = S * rows per sentence, in order); None: as they are."""
    if column_mask is None:
        return logits
    by_sentence = tf.reshape(logits, [tf.shape(column_mask)[0], -1, tf.shape(logits)[1]])
    return tf.reshape(tf.where(column_mask[:, None, :], by_sentence, NEG_INF), tf.shape(logits))


def implementation_timings(rows: int, columns: int, k: int = 9, dtype=tf.float32, rounds: int = 3) -> dict:
    """{implementation: ms} of 8 `row_candidates` calls one after another over [rows, columns]
    logits in `dtype` (the graph one reads them cast to float32, as the step gives them to it),
    on this machine (`timing.best_milliseconds`); "native" only where it loaded. What the
    decode kernel choice `beam_candidates` picks from (decoding/kernel_choices.py)."""
    logits = tf.random.stateless_normal([4, rows, columns], seed=(5, 6), dtype=dtype)

    def chained(native_kernel: bool):
        @tf.function(autograph=False)
        def run():
            outputs = []
            for i in range(8):
                with tf.control_dependencies(outputs[-1:]):
                    row = logits[i % 4] if native_kernel else tf.cast(logits[i % 4], tf.float32)
                    outputs.append(row_candidates(row, k, 1, native_kernel)[0])
            return outputs[-1]

        return lambda: run().numpy()

    runs = {"graph": chained(False)}
    if native.library() is not None:
        runs["native"] = chained(True)
    return best_milliseconds(runs, rounds)

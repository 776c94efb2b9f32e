"""tf.math.top_k over vocabulary-sized rows, by blocks."""

import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.timing import best_milliseconds

TOP_K_BLOCK = 32  # the fastest of 32, 64, 128, 256 at k = 8 for 1000 to 32000 columns on the AVX2 EPYC (8000: 0.43 ms vs 0.70 at 128)
_MIN_BLOCKS = 2  # a row of fewer than 2 k blocks goes through tf.math.top_k whole


def top_k_rows(values, k: int, native_kernel: bool = False):
    """tf.math.top_k(values, k) of [N, V] float32 values: the same values and indices, ties
    included, several times faster for a vocabulary-sized V and a beam-sized k.

    With `native_kernel` (where `native.library()` loaded; never in a graph that is exported),
    one native kernel (kernels/native/top_k.cc) reads each row once, skipping each block of 64
    values whose maximum does not beat the k-th best so far (1.3-1.6x the blocked top-k at
    32-128 rows of 8000 on a Zen 4).

    Each row is cut into blocks of TOP_K_BLOCK values (padded with -inf to a multiple of it);
    the k largest values of the row lie in the k blocks with the largest maxima, so only those
    k blocks, kept in row order, go through top_k (TensorFlow's CPU top_k heaps every value of
    the row one by one, while a block maximum is a vectorised reduction). V need not be known
    when the graph is built (a shortlist's columns). Rows too short for blocks to pay off go
    through tf.math.top_k whole.
    """
    if native_kernel and native.library() is not None:
        top_values, indices = native.library().t2t_top_k_rows(values, k=k)
        return top_values, indices
    size = values.shape[-1]
    if size is not None and size < _MIN_BLOCKS * k * TOP_K_BLOCK:
        return tf.math.top_k(values, k=k)
    width = tf.shape(values)[1] if size is None else size
    padding = -width % TOP_K_BLOCK
    if size is not None:
        if padding:
            values = tf.pad(values, [[0, 0], [0, padding]], constant_values=float("-inf"))
        return _by_blocks(values, k, size + padding)
    values = tf.cond(padding > 0, lambda: tf.pad(values, [[0, 0], [0, padding]], constant_values=float("-inf")),
                     lambda: values)
    return tf.cond(width < _MIN_BLOCKS * k * TOP_K_BLOCK, lambda: tuple(tf.math.top_k(values, k=k)),
                   lambda: _by_blocks(values, k, width + padding))


def _by_blocks(values, k: int, size):
    """top_k of [N, size] values over blocks of TOP_K_BLOCK (size a multiple of it)."""
    block = TOP_K_BLOCK
    rows, blocks = tf.shape(values)[0], size // block
    by_block = tf.reshape(values, [rows, blocks, block])
    _, chosen = tf.math.top_k(tf.reduce_max(by_block, axis=-1), k=k)
    chosen = tf.sort(chosen, axis=-1)  # row order, so that ties go to the lowest index as in top_k
    candidates = tf.reshape(tf.gather(by_block, chosen, batch_dims=1), [rows, k * block])
    top_values, positions = tf.math.top_k(candidates, k=k)
    indices = tf.gather(chosen, positions // block, batch_dims=1) * block + positions % block
    return top_values, indices


def implementation_timings(rows: int, columns: int, k: int = 9, rounds: int = 3) -> dict:
    """{implementation: ms} of 8 `top_k_rows` calls one after another over [rows, columns]
    float32 values on this machine (`timing.best_milliseconds`); "native" only where it
    loaded. What the decode kernel choice `top_k` picks from (decoding/kernel_choices.py)."""
    values = tf.random.stateless_normal([4, rows, columns], seed=(7, 8))

    def chained(native_kernel: bool):
        @tf.function(autograph=False)
        def run():
            outputs = []
            for i in range(8):
                with tf.control_dependencies(outputs[-1:]):
                    outputs.append(top_k_rows(tf.identity(values[i % 4]), k, native_kernel)[0])
            return outputs[-1]

        return lambda: run().numpy()

    runs = {"graph": chained(False)}
    if native.library() is not None:
        runs["native"] = chained(True)
    return best_milliseconds(runs, rounds)

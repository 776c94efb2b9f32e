"""The training loss of the output layer in one piece: decoder states and the projection table
in, per-token label-smoothed cross-entropy out, its gradient written out, in a layout chosen
by timing them on the machine that trains (`fastest_layout`).

The output projection and its loss are most of a small model's step (the [tokens, vocab]
products are three of its largest). Which orientation of those three products oneDNN runs
fastest depends on the CPU: on the 2-core AVX2 EPYC (Zen 3) the vocabulary-major layout takes
the output layer from ~450 to ~360 ms at the bench's tiny shape, where the AVX-512 EPYC
preferred a transposed copy of the table's gradient (docs/results/training_speed.md, "Kernel choices").
"""

import tensorflow as tf

from t2t_keras.kernels import native
from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy, smoothing_weights
from t2t_keras.kernels.matmul import transposed_copy
from t2t_keras.kernels.timing import best_milliseconds

# rows: logits [N, V] = states @ table^T, one softmax per row; dtable = dlogits^T @ states.
# rows_copy: the same, dtable taken as a transposed copy of states^T @ dlogits.
# columns: logits^T [V, N] = table @ states^T, the softmax down each column; dtable =
#   dlogits^T @ states with no transposed operand, dstates a transposed copy of table^T @ dlogits^T.
# rows_in_chunks: rows, CHUNK_ROWS rows at a time, so that each chunk's float32 [rows, V] passes
#   (softmax, normaliser, sums, gradient) stay in the core's cache; the forward writes the
#   gradient before the per-token weights (softmax - smoothed targets, in the table's dtype), and
#   the backward applies the weights to the [N, d] sides of its two products, not to [N, V].
# native_rows, native_rows_in_chunks: rows and rows_in_chunks with each chunk's loss and gradient
#   from one native kernel (kernels/native/cross_entropy.cc); offered only where it was built.
LAYOUTS = ("rows", "rows_copy", "columns", "rows_in_chunks", "native_rows", "native_rows_in_chunks")
NATIVE_LAYOUTS = ("native_rows", "native_rows_in_chunks")
CHUNK_ROWS = 128  # fastest of 64, 128 and 256 (bf16 products, d_model 256, 8192 pieces, AMX): 4 MB of float32 logits


def projected_cross_entropy(states, table, targets, label_smoothing: float, layout: str = "rows"):
    """Smoothed cross-entropy [N] (float32) of softmax(states @ table^T) against `targets`.

    states [N, d] and table [V, d] in one float dtype, targets [N] int32. Equal to
    `cross_entropy.smoothed_cross_entropy(targets, states @ table^T, label_smoothing)` in every
    layout (tests/kernels/test_output_loss.py); the gradient flows to states and table.
    """
    if layout not in available_layouts():
        raise ValueError(f"projected_cross_entropy: layout must be one of {', '.join(available_layouts())} here, got {layout!r}.")
    return _LOSSES[layout](float(label_smoothing))(states, table, tf.cast(targets, tf.int32))


def logits_with_copied_table_gradient(states, table):
    """states [N, d] @ table^T [d, V] (transpose_b: no copy of the table at every call), with
    the table's gradient taken as a transposed copy of states^T @ dlogits: oneDNN computes
    dlogits^T @ states ([8192, 1024] x [1024, 512]) at ~375 GFLOP/s on a 2-core AVX-512 EPYC,
    the product and the copy together at ~410 (on the AVX2 EPYC the copy loses)."""

    @tf.custom_gradient
    def product(states, table):
        def gradient(upstream):
            return tf.matmul(upstream, table), transposed_copy(tf.matmul(states, upstream, transpose_a=True))

        return tf.matmul(states, table, transpose_b=True), gradient

    return product(states, table)


def _rows(label_smoothing: float, product):
    """A row layout: `smoothed_cross_entropy` (its gradient written out) of `product`'s logits."""

    def loss(states, table, targets):
        return smoothed_cross_entropy(targets, tf.cast(product(states, table), tf.float32), label_smoothing)

    return loss


def _columns(label_smoothing: float):
    @tf.custom_gradient
    def loss(states, table, targets):
        logits = tf.cast(tf.matmul(table, states, transpose_b=True), tf.float32)  # [V, N]
        vocab_size, rows = tf.shape(logits)[0], tf.shape(logits)[1]
        off_value, on_weight = smoothing_weights(label_smoothing, vocab_size)
        largest = tf.reduce_max(logits, axis=0)
        exponentials = tf.exp(logits - largest)
        sums = tf.reduce_sum(exponentials, axis=0)
        probs = exponentials / sums
        target_cells = tf.stack([targets, tf.range(rows)], axis=1)
        losses = largest + tf.math.log(sums) - on_weight * tf.gather_nd(logits, target_cells)
        if label_smoothing:
            losses -= off_value * tf.reduce_sum(logits, axis=0)

        def gradient(upstream):
            dlogits = tf.tensor_scatter_nd_sub((probs - off_value) * upstream[None, :], target_cells, on_weight * upstream)
            dlogits = tf.cast(dlogits, table.dtype)  # [V, N]
            return transposed_copy(tf.matmul(table, dlogits, transpose_a=True)), tf.matmul(dlogits, states), None

        return losses, gradient

    return loss


def _graph_chunk_loss(logits, targets, off_value, on_weight, label_smoothing: float):
    """(losses [n] float32, d loss / d logits [n, V] in logits' dtype, before the upstream
    weights) of one chunk's logits, by TensorFlow's ops."""
    rows = tf.shape(logits)[0]
    logits_f32 = tf.cast(logits, tf.float32)
    probs = tf.nn.softmax(logits_f32)
    # log sum exp = the largest logit - log of the largest probability (at least 1 / V)
    normalizers = tf.reduce_max(logits_f32, axis=1) - tf.math.log(tf.reduce_max(probs, axis=1))
    losses = normalizers - on_weight * tf.gather(logits_f32, targets, batch_dims=1)
    if label_smoothing:
        losses -= off_value * tf.reduce_sum(logits_f32, axis=1)
    target_cells = tf.stack([tf.range(rows), targets], axis=1)
    unweighted = tf.tensor_scatter_nd_sub(probs - off_value, target_cells, tf.fill([rows], on_weight))
    return losses, tf.cast(unweighted, logits.dtype)


def _native_chunk_loss(logits, targets, off_value, on_weight, label_smoothing: float):
    """`_graph_chunk_loss` as one native kernel (kernels/native/cross_entropy.cc): one read of
    the logits, one write of the gradient."""
    losses, unweighted = native.library().t2t_smoothed_cross_entropy(logits, targets, off_value, on_weight)
    return losses, unweighted


def _rows_in_chunks(label_smoothing: float, chunk_loss=_graph_chunk_loss, chunk_rows: int = CHUNK_ROWS):
    """The rows layout a chunk of `chunk_rows` rows at a time (all rows at once if None), each
    chunk's loss and unweighted gradient from `chunk_loss`; the backward weights the [N, d]
    sides of its two products."""

    @tf.custom_gradient
    def loss(states, table, targets):
        rows, vocab_size = tf.shape(states)[0], tf.shape(table)[0]
        off_value, on_weight = smoothing_weights(label_smoothing, vocab_size)
        if chunk_rows is None:
            padding, padded_states = 0, states
            losses, unweighted = chunk_loss(tf.matmul(states, table, transpose_b=True), targets, off_value, on_weight,
                                            label_smoothing)
        else:
            chunks = (rows + chunk_rows - 1) // chunk_rows
            padding = chunks * chunk_rows - rows  # zero states: their gradient rows meet zero weights
            padded_states = tf.pad(states, [[0, padding], [0, 0]])

            def one_chunk(chunk):
                chunk_states, chunk_targets = chunk
                return chunk_loss(tf.matmul(chunk_states, table, transpose_b=True), chunk_targets, off_value, on_weight,
                                  label_smoothing)

            losses, unweighted = tf.map_fn(
                one_chunk,
                (tf.reshape(padded_states, [chunks, chunk_rows, -1]), tf.reshape(tf.pad(targets, [[0, padding]]), [chunks, chunk_rows])),
                fn_output_signature=(tf.float32, table.dtype), parallel_iterations=2)
            losses = tf.reshape(losses, [-1])[:rows]
            unweighted = tf.reshape(unweighted, [chunks * chunk_rows, vocab_size])  # d loss_n / d logits_n

        def gradient(upstream):
            weights = tf.cast(tf.pad(upstream, [[0, padding]])[:, None], table.dtype)
            dstates = tf.matmul(unweighted, table) * weights
            return dstates[:rows], tf.matmul(unweighted, padded_states * weights, transpose_a=True), None

        return losses, gradient

    return loss


def projected_rdrop_loss(states, table, targets, label_smoothing: float, alpha: float):
    """R-Drop's per-token loss [2N] (float32) of softmax(states @ table^T), where rows n and
    n + N are one token under two dropout masks: row n's smoothed cross-entropy plus alpha / 2 *
    KL(p_n || p_{n+N}), and row n + N's against row n (fairseq's R-Drop criterion; Liang et al.,
    2021). states [2N, d] and table [V, d] in one float dtype, targets [2N] int32.

    The logits stay inside and the gradient is written out (rows layout): autodiff of the
    log-softmax, the divergence and the cross-entropy took several more passes over the
    [2N, V] logits, which made an R-Drop update ~2.7-3x a plain one where its doubled batch
    alone is 2x (docs/log/2026-11-22_to_2026-12-03.md, "Past 41.5"). Equal to the formula by autodiff in
    tests/kernels/test_output_loss.py.
    """
    return _rdrop_loss(float(label_smoothing), float(alpha))(states, table, tf.cast(targets, tf.int32))


def _rdrop_loss(label_smoothing: float, alpha: float):
    @tf.custom_gradient
    def loss(states, table, targets):
        logits = tf.cast(tf.matmul(states, table, transpose_b=True), tf.float32)  # [2N, V]
        rows, vocab_size = tf.shape(logits)[0], tf.shape(logits)[1]
        off_value, on_weight = smoothing_weights(label_smoothing, vocab_size)
        log_probs = tf.nn.log_softmax(logits)
        probs = tf.exp(log_probs)
        log_ratios = log_probs - tf.roll(log_probs, rows // 2, axis=0)  # log p_n - log p_twin
        divergences = tf.reduce_sum(probs * log_ratios, axis=-1)
        target_cells = tf.stack([tf.range(rows), targets], axis=1)
        losses = -on_weight * tf.gather_nd(log_probs, target_cells) + 0.5 * alpha * divergences
        if label_smoothing:
            losses -= off_value * tf.reduce_sum(log_probs, axis=-1)

        def gradient(upstream):
            # d/dz_n of u_n * (CE_n + a/2 KL(p_n || p_twin)) + u_twin * a/2 KL(p_twin || p_n):
            # u_n (p_n - smoothed_n) + a/2 [u_n p_n (log_ratio_n - KL_n) + u_twin (p_n - p_twin)]
            own = upstream[:, None]
            twin = tf.roll(upstream, rows // 2, axis=0)[:, None]
            half_alpha = 0.5 * alpha
            dlogits = probs * (own * (1.0 + half_alpha * (log_ratios - divergences[:, None])) + half_alpha * twin)
            dlogits -= half_alpha * twin * tf.roll(probs, rows // 2, axis=0) + off_value * own
            dlogits = tf.tensor_scatter_nd_sub(dlogits, target_cells, on_weight * upstream)
            dlogits = tf.cast(dlogits, table.dtype)
            return tf.matmul(dlogits, table), tf.matmul(dlogits, states, transpose_a=True), None

        return losses, gradient

    return loss


_LOSSES = {
    "rows": lambda eps: _rows(eps, lambda states, table: tf.matmul(states, table, transpose_b=True)),
    "rows_copy": lambda eps: _rows(eps, logits_with_copied_table_gradient),
    "columns": _columns,
    "rows_in_chunks": _rows_in_chunks,
    "native_rows": lambda eps: _rows_in_chunks(eps, _native_chunk_loss, chunk_rows=None),
    "native_rows_in_chunks": lambda eps: _rows_in_chunks(eps, _native_chunk_loss),
}


def available_layouts() -> tuple:
    """LAYOUTS that run here: the native ones only where `native.library()` loaded."""
    return tuple(layout for layout in LAYOUTS if layout not in NATIVE_LAYOUTS or native.library() is not None)


def layout_timings(rows: int, hidden_size: int, vocab_size: int, dtype=tf.float32, rounds: int = 3) -> dict:
    """Milliseconds of one forward + backward of each available layout at [rows, hidden_size] x
    [vocab_size, hidden_size] on this machine (`timing.best_milliseconds`). Random inputs; a few
    seconds at 1024 x 512 x 8192 on 2 cores."""
    states = tf.random.stateless_normal([rows, hidden_size], seed=(1, 2), dtype=dtype)
    table = tf.random.stateless_normal([vocab_size, hidden_size], seed=(3, 4), dtype=dtype) * hidden_size**-0.5
    targets = tf.random.stateless_uniform([rows], seed=(5, 6), maxval=vocab_size, dtype=tf.int32)

    def forward_backward_of(layout):
        @tf.function(autograph=False)
        def forward_backward(states, table, targets):
            with tf.GradientTape() as tape:
                tape.watch([states, table])
                total = tf.reduce_sum(projected_cross_entropy(states, table, targets, 0.1, layout))
            return tape.gradient(total, [states, table])

        return forward_backward

    def finished(layout):
        run = forward_backward_of(layout)
        return lambda: [gradient.numpy() for gradient in run(states, table, targets)]

    return best_milliseconds({layout: finished(layout) for layout in available_layouts()}, rounds)

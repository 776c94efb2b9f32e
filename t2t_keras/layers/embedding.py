"""Token embeddings scaled by sqrt(d_model), reusable as the pre-softmax projection."""

from typing import Callable, NamedTuple

import keras
import tensorflow as tf
from keras import ops

from t2t_keras.kernels.int8_logits import int8_logits, quantized_output_weights
from t2t_keras.kernels.matmul import transposed_copy
from t2t_keras.kernels.output_loss import logits_with_copied_table_gradient, projected_cross_entropy, projected_rdrop_loss
from t2t_keras.kernels.timing import best_milliseconds


@keras.saving.register_keras_serializable(package="t2t_keras")
class SharedEmbedding(keras.layers.Layer):
    """One [vocab_size, d_model] matrix for embedding lookups and output logits (section 3.4).

    `call(ids)` returns table[ids] * sqrt(d_model); `logits(x)` returns x @ table^T, so the
    same weights serve the source embedding, the target embedding and the pre-softmax
    linear transformation. Initialised N(0, d_model^-0.5), as tensor2tensor, so the scaled
    embeddings start with unit variance.

    Args:
      vocab_size: rows of the table.
      hidden_size: d_model.
    """

    def __init__(self, vocab_size, hidden_size, **kwargs):
        super().__init__(**kwargs)
        if int(vocab_size) <= 0 or int(hidden_size) <= 0:
            raise ValueError(f"SharedEmbedding: vocab_size and hidden_size must be positive, got {vocab_size}, {hidden_size}.")
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.loss_layout = "rows"  # of token_losses; chosen per machine by training.kernel_choices
        self.loss_products = "variable"  # token_losses' products in the variables' dtype, or "compute" (ditto)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
        )

    def call(self, ids):
        vectors = ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0)
        return ops.cast(vectors, self.compute_dtype) * ops.cast(self.hidden_size**0.5, self.compute_dtype)

    def logits(self, inputs, training=None):
        """[..., d_model] -> float32 [..., vocab_size] with the transposed table; `training`:
        with the table's gradient through a transposed copy (kernels/output_loss.py; else the plain product).

        The product runs in the table's dtype: float32 under mixed precision, where a bfloat16
        [tokens, vocab] product only to be cast up for the softmax cost more than it saved
        (docs/results/training_speed.md, "Hand-written kernels"); bfloat16 in a bfloat16 model (bf16 decoding,
        whose largest product it is). Float32 logits are what the loss and beam search want.
        """
        table = self._table()
        flat = tf.reshape(tf.cast(inputs, table.dtype), [-1, self.hidden_size])
        logits = tf.cast(logits_with_copied_table_gradient(flat, table) if training else tf.matmul(flat, table, transpose_b=True), tf.float32)
        return tf.reshape(logits, tf.concat([tf.shape(inputs)[:-1], [self.vocab_size]], axis=0))

    def products_dtype(self):
        """The dtype of `token_losses`' products: the table's (float32 under mixed precision, as
        `logits`), or the layer's compute dtype where `loss_products` is "compute"."""
        return self.compute_dtype if self.loss_products == "compute" else self.embeddings.dtype

    def token_losses(self, inputs, targets, label_smoothing: float, rdrop_alpha: float = 0.0):
        """Label-smoothed cross-entropy [...] (float32) of `logits(inputs)` against target ids
        [...], by the fused kernel of kernels/output_loss.py in `self.loss_layout`: the same
        products as `logits`, in `products_dtype()`, without handing [..., vocab] logits out. With
        `rdrop_alpha`, the leading axis holds every sentence twice (rows b and b + B) and each
        token's loss adds alpha / 2 times its divergence from its twin (`projected_rdrop_loss`)."""
        table = tf.cast(self._table(), self.products_dtype())
        flat = tf.reshape(tf.cast(inputs, table.dtype), [-1, self.hidden_size])
        flat_targets = tf.reshape(targets, [-1])
        if rdrop_alpha:
            losses = projected_rdrop_loss(flat, table, flat_targets, label_smoothing, rdrop_alpha)
        else:
            losses = projected_cross_entropy(flat, table, flat_targets, label_smoothing, self.loss_layout)
        return tf.reshape(losses, tf.shape(targets))

    def output_weights(self, vocabulary=None, product: str = "nn") -> "StepWeights":
        """The output projection as `step_logits` multiplies by it, prepared once per search:
        the table's rows of `vocabulary` (token ids [V'], a shortlist's; None: all) for
        `product`, the float product's orientation ("nn", "nt", "tn": `STEP_PRODUCTS`, which the
        decode kernel choice times on the machine) or "int8" (quantised for the native int8
        product, `kernels/int8_logits.py`); with `vocabulary` [G, V'] (a shortlist's groups, G
        known when the graph is built), one per group."""
        if product == "int8":
            return StepWeights(product, quantized_output_weights(
                self._table(), vocabulary if vocabulary is None or vocabulary.shape.rank == 2 else vocabulary[None]))
        prepare = STEP_PRODUCTS[product].prepare
        if vocabulary is not None and vocabulary.shape.rank == 2:
            return StepWeights(product, tuple(prepare(tf.gather(self._table(), row)) for row in tf.unstack(vocabulary)))
        return StepWeights(product, prepare(self._table() if vocabulary is None else tf.gather(self._table(), vocabulary)))

    def step_logits(self, inputs, weights: "StepWeights", float32: bool = True, group_rows=None):
        """`logits` of one decoding step's few rows: [N, d_model] -> [N, V'], with `weights`
        from `output_weights` (V' its tokens): float32, or in the weights' dtype (int8
        weights: the inputs'). Grouped weights (a tuple, or int8 ones of several groups) need
        `group_rows` [G]: how many of the rows, in order, each group has; each group's rows
        are multiplied by its own weights."""
        product, prepared = weights
        if product == "int8":
            logits = int8_logits(inputs, prepared, group_rows)
        elif isinstance(prepared, tuple):
            rows = tf.split(tf.cast(inputs, prepared[0].dtype), group_rows, num=len(prepared))
            logits = tf.concat([STEP_PRODUCTS[product].product(x, w) for x, w in zip(rows, prepared)], axis=0)
        else:
            logits = STEP_PRODUCTS[product].product(tf.cast(inputs, prepared.dtype), prepared)
        return tf.cast(logits, tf.float32) if float32 else logits

    def step_product_timings(self, rows: int) -> dict:
        """{orientation: ms} of `step_logits` for `rows` rows on this machine, in the table's
        dtype (eagerly, about a second): what the decode kernel choice `step_product` picks from
        (decoding/kernel_choices.py). Which one wins for a few hundred rows depends on the CPU:
        docs/results/training_speed.md, "Hand-written kernels"; docs/log/2026-11-22_to_2026-12-03.md, "Decoding the demo model"."""
        return _step_product_timings(self._table(), int(rows))

    def _table(self):
        """The table as the output products read it: in the variable's dtype (see `logits`),
        also inside a mixed-precision call, where Keras reads variables autocast to bfloat16."""
        return tf.cast(self.embeddings, self.embeddings.dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size)
        return config


class StepWeights(NamedTuple):
    """The output projection prepared for a search's steps (`SharedEmbedding.output_weights`)."""

    product: str  # "int8", or the float product's orientation (a key of STEP_PRODUCTS)
    weights: object  # the prepared table (a tuple of them, one per shortlist group), or QuantizedOutputWeights


class _Orientation(NamedTuple):
    prepare: Callable  # the table [V, d] -> the weights the product reads, once per search
    product: Callable  # (x [N, d], weights) -> logits [N, V]


STEP_PRODUCTS = {
    # x @ W^T with W^T copied row-major once per search: the layout oneDNN's GEMM reads best on
    # the AVX2 EPYC (2x either other one at 64 rows).
    "nn": _Orientation(transposed_copy, lambda x, weights: tf.matmul(x, weights)),
    # x @ W^T reading the table in place (transpose_b), as `logits`.
    "nt": _Orientation(lambda table: table, lambda x, table: tf.matmul(x, table, transpose_b=True)),
    # (W @ x^T)^T: the AVX-512 EPYC's fastest for 64 rows (docs/results/training_speed.md, "Hand-written kernels").
    "tn": _Orientation(lambda table: table, lambda x, table: tf.transpose(tf.matmul(table, x, transpose_b=True))),
}


def _step_product_timings(table, rows: int, repeats: int = 8, rounds: int = 3) -> dict:
    """{orientation: ms} of the step product for [rows, d] inputs: the best of `rounds` runs of
    `repeats` chained products each (chained, so that no two are the same product), each
    followed by a softmax over the vocabulary as in decoding (so that a transposed product is
    materialised in [N, V] layout, not folded away into its consumer), in turns
    (`timing.best_milliseconds`)."""

    def chained(orientation):
        @tf.function(autograph=False)
        def run(x):
            weights = orientation.prepare(table)
            for _ in range(repeats):
                probabilities = tf.nn.softmax(orientation.product(x, weights))
                x = x + tf.reduce_max(probabilities, axis=1, keepdims=True)
            return x

        return run

    x = tf.random.stateless_normal([rows, table.shape[1]], seed=(0, 0), dtype=table.dtype)
    runs = {name: (lambda run: lambda: run(x).numpy())(chained(orientation)) for name, orientation in STEP_PRODUCTS.items()}
    return best_milliseconds(runs, rounds)

"""Token embeddings scaled by sqrt(d_model), reusable as the pre-softmax projection."""

import keras
import tensorflow as tf
from keras import ops


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

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
        )

    def call(self, ids):
        vectors = ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0)
        return ops.cast(vectors, self.compute_dtype) * ops.cast(self.hidden_size**0.5, self.compute_dtype)

    def logits(self, inputs):
        """[..., d_model] -> float32 [..., vocab_size] with the transposed table.

        Always in float32: under mixed precision a bfloat16 [tokens, vocab] product only to be
        cast up for the softmax cost more than it saved (measured: 0.68 s vs 0.41 s forward and
        backward of logits + loss on the bench's tiny shape), and float32 logits are what the
        loss and beam search want anyway.
        """
        # transpose_b instead of a transposed copy of the [V, d] table at every call.
        flat = tf.reshape(tf.cast(inputs, tf.float32), [-1, self.hidden_size])
        logits = tf.matmul(flat, tf.cast(self.embeddings, tf.float32), transpose_b=True)
        return tf.reshape(logits, tf.concat([tf.shape(inputs)[:-1], [self.vocab_size]], axis=0))

    def step_logits(self, inputs):
        """`logits` of one decoding step's few rows: [N, d_model] -> float32 [N, vocab_size].

        Computed as (table @ inputs^T)^T: for a few hundred rows TF's CPU matmul runs that
        orientation 2-2.5x faster (256 rows, d_model 256, vocab 8192: 11.4 vs 24.1 ms with the
        transpose), while for training's thousands of rows `logits`' orientation is faster.
        """
        transposed = tf.matmul(tf.cast(self.embeddings, tf.float32), tf.cast(inputs, tf.float32), transpose_b=True)
        return tf.transpose(transposed)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size)
        return config

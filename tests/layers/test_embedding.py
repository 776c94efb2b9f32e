import numpy as np
import tensorflow as tf

from t2t_keras.layers.embedding import SharedEmbedding
from tests.testing import run_layer_test


def test_layer_contract():
    run_layer_test(
        SharedEmbedding,
        dict(vocab_size=11, hidden_size=8),
        dict(ids=tf.constant([[1, 2, 3], [4, 0, 10]])),
        expected_output_shape=(2, 3, 8),
        expected_num_trainable_weights=1,
    )


def test_lookup_is_scaled_and_logits_use_the_same_matrix():
    layer = SharedEmbedding(vocab_size=11, hidden_size=16)
    ids = tf.constant([[3, 7]])
    table = None
    vectors = layer(ids).numpy()
    table = layer.embeddings.numpy()
    np.testing.assert_allclose(vectors[0], table[[3, 7]] * 4.0, rtol=1e-6)
    x = np.random.default_rng(0).normal(size=(2, 16)).astype("float32")
    np.testing.assert_allclose(layer.logits(x).numpy(), x @ table.T, rtol=1e-5, atol=1e-5)


def test_step_logits_equal_logits():
    layer = SharedEmbedding(vocab_size=300, hidden_size=16)
    layer.build()
    x = np.random.default_rng(0).normal(size=(12, 16)).astype("float32")
    shortlist = tf.constant([1, 5, 17, 299])
    groups = tf.constant([[1, 5, 17, 299], [2, 3, 4, 4], [7, 8, 9, 10]])  # rows 0-4, none, 5-11
    group_rows = tf.constant([5, 0, 7])
    for product in ("nn", "nt", "tn"):  # every orientation the decode kernel choice step_product picks from
        np.testing.assert_allclose(layer.step_logits(x, layer.output_weights(None, product)), layer.logits(x),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(layer.step_logits(x, layer.output_weights(shortlist, product)),
                                   tf.gather(layer.logits(x), shortlist, axis=1), rtol=1e-5, atol=1e-5)
        row_columns = tf.gather(groups, [0] * 5 + [2] * 7)
        np.testing.assert_allclose(layer.step_logits(x, layer.output_weights(groups, product), group_rows=group_rows),
                                   tf.gather(layer.logits(x), row_columns, batch_dims=1), rtol=1e-5, atol=1e-5)
    timings = layer.step_product_timings(12)
    assert sorted(timings) == ["nn", "nt", "tn"] and all(ms > 0 for ms in timings.values())


def test_logits_gradients_equal_those_of_the_plain_product():
    """logits' hand-written gradient (the table's through a transposed copy) equals autodiff of x @ table^T."""
    layer = SharedEmbedding(300, 16)
    layer.build()
    x = tf.random.stateless_normal([2, 6, 16], seed=[3, 4])
    upstream = tf.random.stateless_normal([2, 6, 300], seed=[5, 6])
    results = []
    for logits in (lambda x: layer.logits(x, training=True), lambda x: tf.matmul(x, layer.embeddings, transpose_b=True)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(logits(x) * upstream)
        results.append(tape.gradient(loss, [x, layer.embeddings]))
    for got, expected in zip(*results):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

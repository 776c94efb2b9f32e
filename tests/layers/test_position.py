import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.layers.position import CopyPositionEncoding, LearnedPositionEmbedding, SinusoidalPositionEncoding
from tests.testing import run_layer_test


def _paper_formula(positions, depth):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), in float64."""
    table = np.zeros((len(positions), depth))
    for row, pos in enumerate(positions):
        for dim in range(depth):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / depth)
            table[row, dim] = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
    return table


@pytest.mark.parametrize("depth", [512, 6, 7])
def test_sinusoid_equals_the_papers_formula(depth):
    encoding = SinusoidalPositionEncoding()(tf.zeros((2, 50, depth)))
    assert encoding.shape == (1, 50, depth)
    np.testing.assert_allclose(encoding[0].numpy(), _paper_formula(range(50), depth), atol=2e-5)


def test_sinusoid_offset_for_decoding():
    encoding = SinusoidalPositionEncoding()(tf.zeros((1, 3, 64)), start_index=tf.constant(40))
    np.testing.assert_allclose(encoding[0].numpy(), _paper_formula(range(40, 43), 64), atol=2e-5)


def test_sinusoid_layer_contract():
    layer = SinusoidalPositionEncoding(max_wavelength=10000)
    assert layer.get_config()["max_wavelength"] == 10000.0
    restored = SinusoidalPositionEncoding.from_config(layer.get_config())
    x = tf.zeros((2, 5, 8))
    np.testing.assert_array_equal(restored(x), layer(x))
    assert SinusoidalPositionEncoding(dtype="mixed_bfloat16")(x).dtype == "bfloat16"


def test_learned_layer_contract():
    run_layer_test(
        LearnedPositionEmbedding,
        dict(max_length=20),
        dict(inputs=tf.zeros((2, 5, 8))),
        expected_output_shape=(1, 5, 8),
        expected_num_trainable_weights=1,
    )


def test_learned_offset_reads_later_rows():
    layer = LearnedPositionEmbedding(max_length=20)
    full = layer(tf.zeros((1, 10, 4)))
    np.testing.assert_array_equal(layer(tf.zeros((1, 2, 4)), start_index=6)[0], full[0, 6:8])


def test_copy_position_counts_copied_tokens_and_encodes_them_with_the_sinusoid():
    """Structure tokens (here 3 = "(", 4 = ")", 1 = EOS) and the start symbol 0 do not advance the
    copy position; every other token does; the encoding is the projected sinusoid of the count."""
    layer = CopyPositionEncoding(structure_tokens=[1, 3, 4], vocab_size=20)
    ids = tf.constant([[0, 3, 7, 8, 4, 3, 9, 4, 1], [0, 9, 9, 9, 3, 4, 1, 0, 0]])
    layer.build((None, None, 6))
    layer.projection.kernel.assign(tf.eye(6))
    encodings, last = layer(ids)
    counts = [[0, 0, 1, 2, 2, 2, 3, 3, 3], [0, 1, 2, 3, 3, 3, 3, 3, 3]]
    for row in range(2):
        np.testing.assert_allclose(encodings[row].numpy(), _paper_formula(counts[row], 6), atol=2e-5)
    np.testing.assert_array_equal(last, [3, 3])
    # Incremental decoding: one position at a time from the count so far gives the same.
    copied = tf.zeros([2], tf.int32)
    for index in range(ids.shape[1]):
        step, copied = layer(ids[:, index : index + 1], copied)
        np.testing.assert_allclose(step[:, 0].numpy(), encodings[:, index].numpy(), atol=1e-6)
    restored = CopyPositionEncoding.from_config(layer.get_config())
    assert restored.structure_tokens == (1, 3, 4) and restored.vocab_size == 20

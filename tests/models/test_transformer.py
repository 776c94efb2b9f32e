import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.models import Transformer
from t2t_keras.models.transformer import shift_right

VOCAB = 50


def _tiny(**changes):
    hp = dataclasses.replace(
        registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64, num_heads=4, max_position=64
    )
    return dataclasses.replace(hp, **changes)


VARIANTS = {
    "post_sinusoid": _tiny(),
    "pre_norm": _tiny(norm_type="pre"),
    "learned_positions": _tiny(positional_encoding="learned"),
    "unshared_dk_dv": _tiny(shared_embedding_and_softmax_weights=False, attention_key_depth=3, attention_value_depth=5),
    "copy_positions": _tiny(norm_type="pre", copy_position_encoding=True),
}
STRUCTURE_TOKENS = [1, 3, 4, 5]  # EOS and three "brackets" (ids drawn from 3..VOCAB)


def _build(variant):
    return Transformer.from_hparams(VARIANTS[variant], VOCAB, structure_tokens=STRUCTURE_TOKENS)


def _ids(shape, seed):
    return tf.constant(np.random.default_rng(seed).integers(3, VOCAB, size=shape), tf.int32)


def _logits(model, inputs, targets):
    return model({"inputs": inputs, "targets": targets}, training=False).numpy()


@pytest.mark.parametrize("variant", VARIANTS)
def test_causality(variant):
    """Changing target tokens after position i leaves the logits at positions <= i unchanged.

    logits[:, j] predict targets[:, j] from targets[:, :j], so they stay equal up to j = i + 1
    and must change from j = i + 2 on.
    """
    model = _build(variant)
    inputs, targets = _ids((2, 6), 0), _ids((2, 8), 1)
    before = _logits(model, inputs, targets)
    for i in (0, 3, 5):
        changed = tf.concat([targets[:, : i + 1], _ids((2, 7 - i), 10 + i)], axis=1)
        after = _logits(model, inputs, changed)
        np.testing.assert_allclose(after[:, : i + 2], before[:, : i + 2], atol=1e-5)
        assert np.abs(after[:, i + 2 :] - before[:, i + 2 :]).min(axis=-1).max() > 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_source_padding_changes_nothing(variant):
    """Appending padding to a source sentence leaves encoder outputs and logits unchanged."""
    model = _build(variant)
    inputs, targets = _ids((2, 5), 0), _ids((2, 7), 1)
    padded = tf.pad(inputs, [[0, 0], [0, 4]])
    np.testing.assert_allclose(_logits(model, padded, targets), _logits(model, inputs, targets), atol=1e-5)
    np.testing.assert_allclose(model.encode(padded).outputs[:, :5], model.encode(inputs).outputs, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decoding_reproduces_teacher_forcing(variant):
    """decode_step fed the shifted targets one at a time gives the teacher-forced logits."""
    model = _build(variant)
    inputs = tf.constant([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
    targets = _ids((2, 9), 1)
    full = _logits(model, inputs, targets)
    encoded = model.encode(inputs)
    decoder_inputs = shift_right(targets)
    for product in ("nn", "nt", "tn"):  # every layout the decode kernel choice step_product may pick
        memory, cache = model.init_decoding(encoded)
        step = tf.function(model.decode_step, reduce_retracing=True, autograph=False)  # the graph that beam search will run
        for index in range(targets.shape[1]):
            logits, cache = step(decoder_inputs[:, index], tf.constant(index), cache, memory, model.output_weights(None, product))
            assert np.abs(logits.numpy() - full[:, index]).max() < 1e-4


def test_dropout_only_in_training():
    model = Transformer.from_hparams(_tiny(layer_prepostprocess_dropout=0.5), VOCAB)
    features = {"inputs": _ids((2, 5), 0), "targets": _ids((2, 6), 1)}
    np.testing.assert_array_equal(model(features, training=False), model(features, training=False))
    assert np.abs(model(features, training=True) - model(features, training=False)).max() > 1e-3


def test_dropout_hparams_reach_every_block():
    model = Transformer.from_hparams(_tiny(layer_prepostprocess_dropout=0.3, attention_dropout=0.2, relu_dropout=0.1), VOCAB)
    for block in (*model.encoder_blocks, *model.decoder_blocks):
        attentions = [block.self_attention] + ([block.cross_attention] if hasattr(block, "cross_attention") else [])
        assert [a.dropout for a in attentions] == [0.2] * len(attentions)
        assert block.feed_forward.dropout == 0.1
        assert block.self_attention_residual.dropout == block.feed_forward_residual.dropout == 0.3
    assert model.embedding_dropout.rate == 0.3


def test_shared_weights_are_one_matrix():
    shared = Transformer.from_hparams(_tiny(), VOCAB)
    unshared = Transformer.from_hparams(_tiny(shared_embedding_and_softmax_weights=False), VOCAB)
    assert unshared.count_params() - shared.count_params() == 2 * VOCAB * 32
    assert sum("embeddings" in w.path for w in shared.weights) == 1


def test_separate_target_vocabulary():
    model = Transformer.from_hparams(_tiny(shared_embedding_and_softmax_weights=False), VOCAB, target_vocab_size=30)
    logits = model({"inputs": _ids((1, 4), 0), "targets": tf.constant([[3, 4, 5]])})
    assert logits.shape == (1, 3, 30)
    with pytest.raises(ValueError, match="shared_embedding_and_softmax_weights"):
        Transformer.from_hparams(_tiny(), VOCAB, target_vocab_size=30)


@pytest.mark.parametrize("variant", ["pre_norm", "copy_positions"])
def test_config_round_trip_and_weights(variant):
    model = _build(variant)
    config = json.loads(json.dumps(model.get_config()))
    restored = Transformer.from_config(config)
    features = {"inputs": _ids((2, 4), 0), "targets": _ids((2, 5), 1)}
    restored(features)
    restored.set_weights(model.get_weights())
    np.testing.assert_allclose(restored(features), model(features), atol=1e-6)
    assert restored.hparams == model.hparams


def test_copy_positions_tell_the_decoder_where_it_is_in_the_source():
    """The same token at the same target position, after 2 copied tokens in one row and none in
    the other, gets a different decoder input only with copy_position_encoding; and the hparam
    needs the problem's structure tokens (3, 4: brackets)."""
    targets = tf.constant([[7, 3, 8, 4, 6], [3, 4, 3, 4, 6]])  # 2 copies vs 0 before the last input
    for variant, differs in (("pre_norm", False), ("copy_positions", True)):
        model = _build(variant)
        x, _ = model._embed_targets(targets, 0, training=False)
        assert (np.abs(x[0, -1] - x[1, -1]).max() > 1e-3) == differs
    with pytest.raises(ValueError, match="copy_position_encoding needs a problem"):
        Transformer.from_hparams(VARIANTS["copy_positions"], VOCAB)


@pytest.mark.parametrize("variant", ["pre_norm", "unshared_dk_dv", "copy_positions"])
def test_tf_checkpoint_holds_every_weight(variant, tmp_path):
    """tf.train.Checkpoint (the trainer's format) saves and restores all weights."""
    model = _build(variant)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path) if name.startswith("model/")]
    assert len(saved) == len({id(w) for w in model.weights})
    fresh = _build(variant)
    tf.train.Checkpoint(model=fresh).restore(path).assert_consumed()
    for restored, original in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(restored, original)


def test_registered_as_transformer():
    assert registry.model("transformer") is Transformer


def test_mixed_bfloat16_gives_float32_logits():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = Transformer.from_hparams(_tiny(), VOCAB)
    logits = model({"inputs": _ids((2, 4), 0), "targets": _ids((2, 5), 1)})
    assert logits.dtype == "float32"
    assert all(w.dtype == "float32" for w in model.weights)

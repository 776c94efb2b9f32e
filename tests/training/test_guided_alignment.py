"""Guided alignment: eflomal's word links stored with the shards as piece links, and the loss that
teaches one cross-attention head to follow them (Garg et al., 2019)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.data import datagen, manifest
from t2t_keras.data.tfrecords import parse_examples
from t2t_keras.data.word_alignments import METHOD, piece_links
from t2t_keras.errors import UsageError
from t2t_keras.models import Transformer
from t2t_keras.models.transformer import guided_alignment_losses
from tests.testing import write_corpus_slice


def test_piece_links_link_every_piece_of_linked_words():
    # words: "▁Ein" | "▁Hund" + "e" ; "▁A" | "▁do" + "g"
    assert piece_links({(1, 1), (0, 0)}, ["\u2581A", "\u2581do", "g"], ["\u2581Ein", "\u2581Hund", "e"]) == [
        1, 1, 2, 2, 2, 3, 3, 2, 3, 3]


def test_the_loss_is_the_cross_entropy_from_the_links():
    """Row t's loss: -mean over its aligned source pieces of log weight; 0 for rows with none."""
    rng = np.random.default_rng(0)
    weights = tf.nn.softmax(rng.normal(size=[2, 3, 4]).astype(np.float32))
    links = tf.constant([[2, 1, 3, 1, 4, 3], [0, 0, 0, 0, 0, 0]])  # sentence 0: t0 <- s1, s2; t2 <- s3
    w = weights.numpy()
    expected = np.zeros([2, 3], np.float32)
    expected[0, 0] = -(np.log(w[0, 0, 1]) + np.log(w[0, 0, 2])) / 2
    expected[0, 2] = -np.log(w[0, 2, 3])
    np.testing.assert_allclose(guided_alignment_losses(weights, links).numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def aligned_data(tmp_path_factory):
    """translate_text over 600 Multi30k pairs with word alignments."""
    work = tmp_path_factory.mktemp("aligned")
    text_dir = write_corpus_slice(work / "text", train_lines=600, dev_lines=50)
    problem = registry.problem("translate_text")
    problem.configure(problem.settings_from_flags({
        f"{split}_{side}": os.path.join(text_dir, f"{split}.{language}") for split in ("train", "dev")
        for side, language in (("source", "en"), ("target", "de"))} | {"vocab_size": 800}))
    datagen.generate(problem, str(work / "data"), None, progress=False, word_alignments=True)
    return problem, str(work / "data")


def test_datagen_stores_each_pairs_piece_links(aligned_data):
    """The manifest names the method; each pair's links join real pieces (EOS excluded), most
    pairs have some, and a word spelled alike once on each side ("in", a name, "T-Shirt") is
    mostly linked to itself."""
    problem, data_dir = aligned_data
    assert manifest.load(problem, data_dir)["word_alignments"] == METHOD
    files = manifest.shard_files(problem, data_dir, "train")
    inputs, targets, links = parse_examples(next(iter(tf.data.TFRecordDataset(files).batch(1000))), alignment=True)
    vocabulary = problem.load_vocabularies(data_dir).source
    linked, identical, found = 0, 0, 0
    for source, target, pairs in zip(inputs.to_list(), targets.to_list(), links.to_list()):
        pairs = np.reshape(pairs, [-1, 2]) - 1
        assert (pairs[:, 0] < len(source) - 1).all() and (pairs[:, 1] < len(target) - 1).all() and (pairs >= 0).all()
        linked += len(pairs) > 0
        source_pieces, target_pieces = vocabulary.pieces(source), vocabulary.pieces(target)
        for s, piece in enumerate(source_pieces[:-1]):
            if piece.startswith("\u2581") and len(piece) > 2 and target_pieces.count(piece) == 1 == source_pieces.count(piece):
                identical += 1
                found += [s, target_pieces.index(piece)] in pairs.tolist()
    assert linked > 0.9 * len(inputs.to_list())
    assert identical > 100 and found > 0.6 * identical, (found, identical)


def test_batches_carry_the_links_and_the_loss_follows_them(aligned_data, tmp_path):
    """dataset(alignments=True) batches hold "alignment"; token_losses adds weight x the taught
    head's loss; a few gradient steps on it lower it; data without alignments is one line."""
    problem, data_dir = aligned_data
    batch = next(iter(problem.dataset("train", data_dir, 512, training=True, seed=1, alignments=True)))
    assert batch["alignment"].shape[0] == batch["inputs"].shape[0] and batch["alignment"].shape[1] % 2 == 0
    hparams = registry.hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2,guided_alignment_weight=0.5,"
                                                   "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")
    model = Transformer.from_hparams(hparams, problem.load_vocabularies(data_dir).source.size)
    plain = model.token_losses({"inputs": batch["inputs"], "targets": batch["targets"]}, 0.1, training=True)
    guided = model.token_losses(batch, 0.1, training=True)
    weights = model.attention_weights(batch["inputs"], batch["targets"])["encoder_decoder"][-1][:, 0]
    alignment = guided_alignment_losses(weights, batch["alignment"])
    np.testing.assert_allclose(guided.numpy(), (plain + 0.5 * alignment).numpy(), rtol=1e-4, atol=1e-4)
    optimizer = keras.optimizers.Adam(0.03)
    before = float(tf.reduce_sum(alignment))
    for _ in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(guided_alignment_losses(
                model.attention_weights(batch["inputs"], batch["targets"])["encoder_decoder"][-1][:, 0], batch["alignment"]))
        gradients = tape.gradient(loss, model.trainable_variables)  # the layers above the taught attention get none
        optimizer.apply_gradients([(g, v) for g, v in zip(gradients, model.trainable_variables) if g is not None])
    assert float(loss) < 0.97 * before  # the gradient reaches the taught head (from near-uniform attention: slowly)
    plain_data = tmp_path / "plain"
    datagen.generate(problem, str(plain_data), None, progress=False)
    with pytest.raises(UsageError, match=r"holds no word alignments.*--word_alignments"):
        problem.dataset("train", str(plain_data), 512, training=True, alignments=True)


def test_a_guided_run_aligns_with_the_head_it_taught(trained_output_dir, tmp_path):
    """Its decode settings' alignment_layer and alignment_head are the taught ones, unless given."""
    import json
    import shutil

    from t2t_keras.decoding.trained_run import TrainedRun

    run = shutil.copytree(trained_output_dir, tmp_path / "guided")
    hparams = json.loads((run / "hparams.json").read_text())
    (run / "hparams.json").write_text(json.dumps({**hparams, "guided_alignment_weight": 0.5, "guided_alignment_layer": 0,
                                                  "guided_alignment_head": 1}))
    settings = TrainedRun.resolve(str(run)).decode_hparams
    assert (settings.alignment_layer, settings.alignment_head) == (0, 1)
    assert TrainedRun.resolve(str(run), "alignment_head=-1").decode_hparams.alignment_head == -1
    assert TrainedRun.resolve(trained_output_dir).decode_hparams.alignment_head == -1

"""Fine-tuning with an updated vocabulary (--warm_start_from with --update_vocabulary): before
any update, the model computes for the pieces both vocabularies have what the parent computes,
and translates sentences made of them as the parent does."""

import dataclasses
import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import Translator, registry
from t2t_keras.checkpoints import RunDir, restore_model
from t2t_keras.data import datagen
from t2t_keras.data.tokenizers import Vocabularies, Vocabulary, train_sentencepiece
from t2t_keras.errors import UsageError
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.training import trainer
from tests.conftest import TRAINED_HPARAMS
from tests.testing import seed_generators, write_corpus_slice

KERNELS = {"loss_layout": "rows", "layer_norm": "graph", "bias_relu": "graph"}


def _lines(name, count):
    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


def test_an_updated_vocabulary_starts_where_the_parent_is(trained_output_dir, tmp_path):
    # another vocabulary: fewer pieces, trained on part of the text, so some pieces are new and many are shared
    text = _lines("train.en.gz", 6000) + _lines("train.de.gz", 6000)
    vocabulary = Vocabulary(train_sentencepiece(text, 3000))
    data_dir = str(tmp_path / "data")
    # a slice of the parent's data as the new data (the whole of Multi30k encoded again cost ~15 s)
    text_dir = write_corpus_slice(tmp_path / "text", train_lines=2000, dev_lines=50)
    problem = registry.problem("translate_text")
    problem.configure(problem.settings_from_flags({
        f"{split}_{side}": os.path.join(text_dir, f"{split}.{language}") for split in ("train", "dev")
        for side, language in (("source", "en"), ("target", "de"))}))
    datagen.generate(problem, data_dir, None, progress=False, vocabularies=Vocabularies(vocabulary, vocabulary))
    parent_vocabulary = RunDir(trained_output_dir).vocabularies().source
    settings = trainer.RunSettings(output_dir=str(tmp_path / "child"), data_dir=data_dir, train_steps=1, save_checkpoints_steps=1,
                                   evaluate=False, seed=1, warm_start_from=trained_output_dir, kernel_choices=KERNELS)
    hparams = registry.hparams("transformer_tiny", TRAINED_HPARAMS)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with pytest.raises(UsageError, match=r"its vocabulary \(\d+ pieces, not 3000\).* or add --update_vocabulary"):
        trainer.train(problem, hparams, settings, strategy)
    seed_generators("vocabulary_update")
    settings = dataclasses.replace(settings, update_vocabulary=True)
    trainer.train(problem, hparams, settings, strategy)

    child_dir = RunDir(settings.output_dir)
    assert json.loads(open(child_dir.run_path).read())["vocabulary_updated_from"]["source"] == parent_vocabulary.sha256
    child, _ = restore_model(child_dir, os.path.join(child_dir.path, "ckpt-0"))  # before the first update
    parent, _ = restore_model(RunDir(trained_output_dir))
    parent_ids = {piece: i for i, piece in enumerate(parent_vocabulary.pieces(range(parent_vocabulary.size)))}
    pieces = vocabulary.pieces(range(vocabulary.size))
    shared = [i for i, piece in enumerate(pieces) if piece in parent_ids]
    assert 2000 < len(shared) < vocabulary.size  # shared pieces and new ones

    # sentences both vocabularies split into the same pieces
    sources, targets = _lines("val.en.gz", 200), _lines("val.de.gz", 200)
    same = [(s, t) for s, t in zip(sources, targets)
            if all(vocabulary.pieces(vocabulary.encode(x)) == parent_vocabulary.pieces(parent_vocabulary.encode(x)) for x in (s, t))]
    assert len(same) >= 20
    same = same[:20]

    def batch(vocab, sentences):
        ids = [vocab.encode(x, add_eos=True) for x in sentences]
        width = max(map(len, ids))
        return tf.constant([row + [0] * (width - len(row)) for row in ids])

    # teacher-forced: the shared pieces' logits are the parent's
    child_logits = child({"inputs": batch(vocabulary, [s for s, _ in same]), "targets": batch(vocabulary, [t for _, t in same])})
    parent_logits = parent({"inputs": batch(parent_vocabulary, [s for s, _ in same]),
                            "targets": batch(parent_vocabulary, [t for _, t in same])})
    np.testing.assert_allclose(tf.gather(child_logits, shared, axis=-1).numpy(),
                               tf.gather(parent_logits, [parent_ids[pieces[i]] for i in shared], axis=-1).numpy(),
                               rtol=1e-4, atol=1e-4)
    # and the translations
    child_translator = Translator.from_model(child, Vocabularies(vocabulary, vocabulary), problem, beam_size=4, tune_process=False)
    parent_translator = Translator.from_preset(trained_output_dir, beam_size=4, tune_process=False)
    assert child_translator.generate([s for s, _ in same]) == parent_translator.generate([s for s, _ in same])

    # --new_pieces=parent_pieces: a new piece starts from the mean of the parent's rows of its text's pieces
    from t2t_keras.models import Transformer
    from t2t_keras.training import vocabulary_update

    other = Transformer.from_hparams(RunDir(trained_output_dir).hparams(), vocabulary.size)
    vocabulary_update.warm_start(other, parent, RunDir(trained_output_dir).vocabularies(), Vocabularies(vocabulary, vocabulary),
                                 new_pieces="parent_pieces")
    new = next(i for i, piece in enumerate(pieces) if piece not in parent_ids and piece.startswith("\u2581") and len(piece) > 3)
    split = parent_vocabulary.encode(pieces[new][1:])
    assert len(split) > 1
    table = other.softmax_projection.embeddings.numpy()
    np.testing.assert_allclose(table[new], parent.softmax_projection.embeddings.numpy()[split].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(table[shared], child.softmax_projection.embeddings.numpy()[shared])

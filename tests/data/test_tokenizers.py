"""In-graph tokenisation equals the Python sentencepiece encoding, on every Multi30k val line."""

import gzip
import os
import threading
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.data.tokenizers import Vocabulary, train_sentencepiece
from t2t_keras.token_ids import EOS_ID, PAD_ID, UNK_ID
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR


def _val_lines(language):
    with gzip.open(os.path.join(MULTI30K_DIR, f"val.{language}.gz"), "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def _nmt_nfkc(text):
    """The normalisation we apply, computed independently: NFKC, whitespace runs folded, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.fixture(scope="module")
def vocabulary(multi30k_data_dir):
    return registry.problem("translate_ende_multi30k").load_vocabularies(multi30k_data_dir).source


@pytest.mark.parametrize("language", ["en", "de"])
def test_in_graph_equals_python_for_every_val_line(vocabulary, language):
    lines = _val_lines(language)
    assert len(lines) == 1014
    graph_ids = vocabulary.tf_tokenizer().tokenize(tf.constant(lines)).to_list()
    mismatches = [i for i, line in enumerate(lines) if graph_ids[i] != vocabulary.encode(line, add_eos=True)]
    assert mismatches == []


@pytest.mark.parametrize("language", ["en", "de"])
def test_detokenising_gives_the_normalised_text_back(vocabulary, language):
    lines = _val_lines(language)
    tokenizer = vocabulary.tf_tokenizer()
    graph_text = [t.decode("utf-8") for t in tokenizer.detokenize(tokenizer.tokenize(tf.constant(lines))).numpy()]
    python_text = [vocabulary.decode(vocabulary.encode(line)) for line in lines]
    assert graph_text == python_text == [_nmt_nfkc(line) for line in lines]
    # Only normalisation ever changes the text: all but the no-break-space line are unchanged.
    assert sum(text != line for text, line in zip(python_text, lines)) <= 1


def test_every_row_keeps_its_eos_while_other_tokenizers_of_the_model_run_beside_it(vocabulary):
    """tf-text gives all tokenizers of one model one processor, whose EOS option is shared state.
    The training pipeline's subword sampling and a plain tokenizer (the translator's), called from
    two threads at once as a trainer's input pipeline and its evaluator can: each row of each
    still ends with exactly one EOS (a tokenizer without EOS beside them dropped it from ~14%)."""
    lines = _val_lines("en")[:256]
    written = tf.ragged.constant([vocabulary.encode(line, add_eos=True) for line in lines], dtype=tf.int32)
    resegment, tokenizer = tf.function(vocabulary.sampled_resegmenter(0.1)), vocabulary.tf_tokenizer()
    calls = {"resegmented": lambda: resegment(written), "tokenized": lambda: tokenizer.tokenize(tf.constant(lines))}
    rows_without_one_eos = {name: 0 for name in calls}

    def run(name):
        for _ in range(60):
            ids = calls[name]()
            ends_with_eos = tf.gather(ids.flat_values, ids.row_limits() - 1) == EOS_ID
            one_eos = tf.reduce_sum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 1
            rows_without_one_eos[name] += int(tf.reduce_sum(tf.cast(~(ends_with_eos & one_eos), tf.int32)))

    threads = [threading.Thread(target=run, args=(name,)) for name in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert rows_without_one_eos == {"resegmented": 0, "tokenized": 0}


def test_no_unknown_pieces_thanks_to_byte_fallback(vocabulary):
    text = "Ein Hund 🐕 läuft über 雪"
    ids = vocabulary.encode(text)
    assert UNK_ID not in ids
    assert vocabulary.decode(ids) == text


def test_special_ids_and_decode_stops_at_eos(vocabulary):
    assert vocabulary.size == 8000
    ids = vocabulary.encode("A dog runs.")
    assert PAD_ID not in ids and EOS_ID not in ids
    assert vocabulary.decode(ids + [EOS_ID] + ids + [PAD_ID]) == "A dog runs."
    graph = vocabulary.tf_tokenizer().tokenize(tf.constant(["A dog runs."])).to_list()
    assert graph == [ids + [EOS_ID]] == [vocabulary.encode("A dog runs.", add_eos=True)]


def test_training_is_deterministic():
    sentences = _val_lines("en") + _val_lines("de")
    first, second = train_sentencepiece(sentences, 600), train_sentencepiece(sentences, 600)
    assert first == second
    assert Vocabulary(first).size == 600


def test_vocabulary_file_round_trip(vocabulary, tmp_path):
    path = tmp_path / "v.model"
    path.write_bytes(vocabulary.model_proto)
    loaded = Vocabulary.load(str(path))
    assert loaded.sha256 == vocabulary.sha256
    np.testing.assert_array_equal(loaded.encode("two dogs"), vocabulary.encode("two dogs"))

"""The CTranslate2 export: the same model in OpenNMT's C++ engine, scored and searched there."""

import dataclasses
import gzip
import json
import os
import subprocess
import sys

import ctranslate2
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.checkpoints import RunDir
from t2t_keras.data.tokenizers import Vocabularies, Vocabulary, train_sentencepiece
from t2t_keras.decoding.shortlist import load_run_shortlist
from t2t_keras.translator import Translator
from t2t_keras.errors import UsageError
from t2t_keras.models import Transformer
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.serving import ctranslate2_export
from tests.testing import assert_one_line_error

pytestmark = pytest.mark.slow


def _val(language, count):
    with gzip.open(os.path.join(MULTI30K_DIR, f"val.{language}.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "t2t_keras.bin.exporter", *args], capture_output=True, text=True)


def _our_log_probs(model, vocabularies, sources, targets):
    """log P(target | source) of each pair from the Keras model, EOS included."""
    rows = [(vocabularies.source.encode(s, add_eos=True), vocabularies.target.encode(t, add_eos=True))
            for s, t in zip(sources, targets)]
    result = []
    for source, target in rows:
        logits = model({"inputs": tf.constant([source]), "targets": tf.constant([target])}, training=False)[0]
        log_probs = tf.nn.log_softmax(logits)
        result.append(float(tf.reduce_sum(tf.gather(log_probs, target, batch_dims=1))))
    return result


def _ct2_log_probs(model_dir, vocabularies, sources, targets, compute_type="float32"):
    translator = ctranslate2.Translator(model_dir, device="cpu", compute_type=compute_type)
    results = translator.score_batch(
        [vocabularies.source.pieces(vocabularies.source.encode(s)) for s in sources],
        [vocabularies.target.pieces(vocabularies.target.encode(t)) for t in targets],
    )
    return [sum(result.log_probs) for result in results]


@pytest.fixture(scope="module")
def german_vocabulary():
    """A small German-only SentencePiece model, for a run with two vocabularies."""
    return Vocabulary(train_sentencepiece(_val("de", 1014), 600))


VARIANTS = {
    "post-norm, shared vocabulary, sinusoids": dict(),
    "pre-norm, two vocabularies, learned positions": dict(
        norm_type="pre", shared_embedding_and_softmax_weights=False, positional_encoding="learned", max_position=128),
    "head depth not d_model / heads": dict(attention_key_depth=24, attention_value_depth=24),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ctranslate2_scores_are_ours(variant, trained_output_dir, german_vocabulary, tmp_path):
    """Every architecture variant the exporter maps gives CTranslate2 the same function:
    log P(target | source) of 16 val pairs equal to the Keras model's (random weights,
    scaled up so that a wrong mapping could not hide in near-uniform outputs)."""
    changes = VARIANTS[variant]
    hparams = dataclasses.replace(registry.hparams("transformer_tiny", "hidden_size=64,filter_size=128,num_heads=4"), **changes)
    shared = RunDir(trained_output_dir).vocabularies()
    vocabularies = shared if hparams.shared_embedding_and_softmax_weights else Vocabularies(shared.source, german_vocabulary)
    model = Transformer.from_hparams(hparams, vocabularies.source.size, vocabularies.target.size)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(variable.numpy() * 3.0 + rng.normal(0.0, 0.05, variable.shape).astype(np.float32))
    spec = ctranslate2_export.model_spec(model, vocabularies)
    spec.validate()
    spec.optimize(quantization=None)
    spec.save(str(tmp_path))
    sources, targets = _val("en", 16), _val("de", 16)
    ours = _our_log_probs(model, vocabularies, sources, targets)
    theirs = _ct2_log_probs(str(tmp_path), vocabularies, sources, targets)
    assert min(ours) < -40  # far from uniform: the equality below means something
    # float32 sums over a sentence of such logits, in each engine's order: 1.2e-4 apart seen at -608.
    np.testing.assert_allclose(theirs, ours, rtol=3e-4, atol=1e-3)


def test_copy_positions_cannot_be_exported(trained_output_dir):
    hparams = registry.hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2,copy_position_encoding=true")
    vocabularies = RunDir(trained_output_dir).vocabularies()
    model = Transformer.from_hparams(hparams, vocabularies.source.size, structure_tokens=[3, 4])
    with pytest.raises(UsageError, match="copy_position_encoding"):
        ctranslate2_export.model_spec(model, vocabularies)


@pytest.fixture(scope="module")
def exported(trained_output_dir, tmp_path_factory):
    """The trained run exported by the CLI in float32 and int8; returns their directories."""
    work = tmp_path_factory.mktemp("ct2")
    paths = {}
    for quantization in ("float32", "int8"):
        path = str(work / quantization)
        result = _cli(f"--output_dir={trained_output_dir}", "--format=ctranslate2", f"--export_dir={path}",
                      f"--quantization={quantization}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"exported {path}"
        paths[quantization] = path
    return paths


def test_export_directory(exported, trained_output_dir):
    """model.bin, the vocabulary, the SentencePiece model, the shortlist as vmap.txt, metadata."""
    path = exported["float32"]
    assert {"model.bin", "config.json", "shared_vocabulary.json", "source.spm.model", "vmap.txt",
            "t2t_keras_export.json"} <= set(os.listdir(path))
    assert not any(name.startswith(".") for name in os.listdir(os.path.dirname(path)))  # no temporary left
    config = json.load(open(os.path.join(path, "config.json")))
    assert (config["decoder_start_token"], config["eos_token"], config["add_source_eos"]) == ("<pad>", "</s>", True)
    metadata = json.load(open(os.path.join(path, "t2t_keras_export.json")))
    assert metadata["quantization"] == "float32" and metadata["vmap"] == {"per_source": 20, "frequent": 1000}
    shortlist = load_run_shortlist(RunDir(trained_output_dir)).limited(20, 1000)
    vocabulary = RunDir(trained_output_dir).vocabularies().target
    lines = open(os.path.join(path, "vmap.txt"), encoding="utf-8").read().splitlines()
    assert lines[0].split("\t") == ["", " ".join(vocabulary.pieces(shortlist.frequent))]
    rules = dict(line.split("\t") for line in lines[1:])
    token = int(np.argmax((shortlist.candidates > 2).sum(axis=1)))
    kept = [t for t in shortlist.candidates[token] if t > 2]
    assert rules[vocabulary.pieces([token])[0]] == " ".join(vocabulary.pieces(kept))
    assert json.load(open(os.path.join(exported["int8"], "t2t_keras_export.json")))["quantization"] == "int8"


def _ct2_translations(model_dir, vocabulary, sentences, beam_size, alpha, extra_length, compute_type="float32",
                      use_vmap=False):
    """CTranslate2's best output per sentence, each searched alone with our maximum length."""
    translator = ctranslate2.Translator(model_dir, device="cpu", compute_type=compute_type)
    processor = sentencepiece.SentencePieceProcessor(model_proto=vocabulary.model_proto)
    outputs = []
    for sentence in sentences:
        tokens = vocabulary.pieces(vocabulary.encode(sentence))
        # Ours may generate source length (EOS included) + extra_length tokens, EOS included;
        # CTranslate2's maximum does not count an EOS, and by default it forbids EOS first.
        result = translator.translate_batch([tokens], beam_size=beam_size, length_penalty=alpha, use_vmap=use_vmap,
                                            max_decoding_length=len(tokens) + extra_length, min_decoding_length=0)
        outputs.append(processor.decode(result[0].hypotheses[0]))
    return outputs


def test_ctranslate2_decodes_as_ours(exported, trained_output_dir):
    """The searches differ (CTranslate2's greedy follows the argmax to the end and its beam
    keeps the K best of K x V extensions, stopping when its best beam has ended; ours keeps K
    alive and K finished hypotheses of 2K candidates, every length, so at alpha 0 it may
    return an output that ended early), so over the same model ours must find an output at
    least as probable on most lines, at beam 1 and 4. (The demo model's outputs: greedy 1014
    of 1014 val lines identical, beam 4 831: docs/results/serving.md, "CTranslate2 export".) With
    the vmap, CTranslate2 chooses among the sentence's shortlist only."""
    sentences = _val("en", 40)
    vocabularies = RunDir(trained_output_dir).vocabularies()
    for beam_size in (1, 4):
        translator = Translator.from_preset(trained_output_dir, beam_size=beam_size, alpha=0.0, extra_length=10)
        ours = translator.generate(sentences)
        theirs = _ct2_translations(exported["float32"], vocabularies.target, sentences, beam_size, 0.0, 10)
        ours_log_p, their_log_p = np.array(translator.score(sentences, ours)), np.array(translator.score(sentences, theirs))
        assert np.mean(ours_log_p >= their_log_p - 1e-3) >= 0.8, list(zip(ours, theirs, ours_log_p, their_log_p))
    # With the vmap, each output (a sentence a batch) uses only its sentence's shortlist.
    shortlist = load_run_shortlist(RunDir(trained_output_dir)).limited(20, 1000)
    listed = _ct2_translations(exported["float32"], vocabularies.target, sentences, 4, 0.0, 10, use_vmap=True)
    for sentence, output in zip(sentences, listed):
        allowed = {*shortlist.frequent.tolist(), *shortlist.candidates[vocabularies.source.encode(sentence)].ravel().tolist()}
        assert set(vocabularies.target.encode(output)) <= allowed, output


def test_int8_export_is_the_same_function_quantised(exported, trained_output_dir):
    """The int8 model's log P of 16 val pairs within 5% of float32's (weights rounded to 8 bits;
    this barely trained model's were 3.4% off at worst)."""
    vocabularies = RunDir(trained_output_dir).vocabularies()
    sources, targets = _val("en", 16), _val("de", 16)
    full = np.array(_ct2_log_probs(exported["float32"], vocabularies, sources, targets))
    quantized = np.array(_ct2_log_probs(exported["int8"], vocabularies, sources, targets, "int8"))
    assert not np.array_equal(full, quantized)
    np.testing.assert_allclose(quantized, full, rtol=0.05)


def test_existing_export_dir_is_refused(exported, trained_output_dir):
    path = exported["float32"]
    before = sorted(os.listdir(path))
    result = _cli(f"--output_dir={trained_output_dir}", "--format=ctranslate2", f"--export_dir={path}")
    assert_one_line_error(result, f"error: --export_dir={path} already exists")
    assert sorted(os.listdir(path)) == before
    result = _cli(f"--output_dir={trained_output_dir}", "--format=ctranslate2", f"--export_dir={path}-new", "--version=3")
    assert_one_line_error(result, "error: --version is for --format=saved_model")

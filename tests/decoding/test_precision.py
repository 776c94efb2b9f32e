"""bf16 decoding (DecodeHParams.precision): a bfloat16 copy of the model, a search over its
logits, fp32's outputs on most lines, and fp32 where the machine has no bfloat16 units."""

import dataclasses
import gzip
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry, system
from t2t_keras.decoding import graph_search
from t2t_keras.decoding.trained_run import TrainedRun
from t2t_keras.translator import Translator
from t2t_keras.models import Transformer, factory
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.token_ids import PAD_ID

VOCAB = 40


def _model():
    hp = dataclasses.replace(registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64)
    return Transformer.from_hparams(hp, VOCAB)


def _val_sentences(count):
    with gzip.open(os.path.join(MULTI30K_DIR, "val.en.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture
def bf16_units(monkeypatch):
    """Pretends this machine multiplies bfloat16 natively, so bf16 is not replaced by fp32."""
    monkeypatch.setattr(system, "bfloat16_units", lambda: "AVX512_BF16")


def test_bf16_copy_holds_the_fp32_weights_rounded():
    model = _model()
    copy = factory.in_precision(model, "bf16")
    assert factory.in_precision(model, "fp32") is model
    assert len(copy.weights) == len(model.weights) > 0
    for original, rounded in zip(model.weights, copy.weights):
        assert rounded.dtype == "bfloat16", rounded.path
        np.testing.assert_array_equal(rounded.numpy(), tf.cast(original.numpy(), tf.bfloat16).numpy())


def test_bf16_search_is_a_search_over_the_bf16_models_logits():
    """The search keeps log-probabilities in float32 over float32 logits of the bf16 model: its
    cached search finds what the uncached reference (the whole decoder over each prefix, in
    bf16) finds, and each output's score is the bf16 model's own length-penalised log P."""
    model = factory.in_precision(_model(), "bf16")
    sources = tf.constant([[5, 6, 7, 1, 0, 0], [8, 9, 10, 11, 12, 1], [13, 1, 0, 0, 0, 0]])
    max_lengths = graph_search.max_lengths(sources, 6)
    cached = graph_search.search_batch(model, sources, 4, 0.0, max_lengths)
    uncached = graph_search.search_batch(model, sources, 4, 0.0, max_lengths, cached=False)
    memory, cache = model.init_decoding(model.encode(sources))
    step_logits, _ = model.decode_step(tf.constant([0, 0, 0]), 0, cache, memory, model.output_weights())
    assert step_logits.dtype == tf.float32 and cached.scores.dtype == tf.float32
    np.testing.assert_array_equal(cached.ids[:, 0].numpy(), uncached.ids[:, 0].numpy())
    # alpha 0: the score is log P(output), EOS included, under the bf16 model (teacher-forced).
    # Counted by length, not by id: a random model may emit id 0 (padding) as a token, which the
    # search scores like any other (a suite run failed on that, when the mask was ids != 0).
    best = cached.ids[:, 0].numpy()
    within = np.arange(best.shape[1]) < cached.lengths[:, 0].numpy()[:, None]
    targets = tf.constant(np.where(within, best, PAD_ID))
    log_probs = -tf.nn.sparse_softmax_cross_entropy_with_logits(targets, model({"inputs": sources, "targets": targets}))
    rescored = tf.reduce_sum(tf.where(within, log_probs, 0.0), axis=1)
    np.testing.assert_allclose(cached.scores[:, 0].numpy(), rescored.numpy(), atol=0.05)


def test_bf16_translations_are_fp32s_on_most_lines(trained_output_dir, bf16_units):
    sentences = _val_sentences(40)
    fp32 = Translator.from_preset(trained_output_dir, beam_size=4, extra_length=12)
    bf16 = Translator.from_preset(trained_output_dir, beam_size=4, extra_length=12, precision="bf16")
    assert bf16.settings.precision == "bf16"
    assert {weight.dtype for weight in bf16.model.weights} == {"bfloat16"}
    same = sum(a == b for a, b in zip(fp32.generate(sentences), bf16.generate(sentences)))
    assert same >= 30, f"{same} of 40 lines as fp32's"
    assert fp32.generate(sentences, precision="bf16") == bf16.generate(sentences)  # the precision of one call
    # The scores too stay close: log P of fp32's outputs under both models.
    targets = fp32.generate(sentences[:10])
    np.testing.assert_allclose(bf16.score(sentences[:10], targets), fp32.score(sentences[:10], targets), rtol=0.05, atol=0.3)


def test_bf16_falls_back_to_fp32_in_one_line_without_bf16_units(trained_output_dir, monkeypatch, caplog):
    monkeypatch.setattr(system, "bfloat16_units", lambda: None)
    with caplog.at_level(logging.WARNING):
        translator = Translator.from_preset(trained_output_dir, precision="bf16")
    assert translator.settings.precision == "fp32"
    assert {weight.dtype for weight in translator.model.weights} == {"float32"}
    lines = [record.getMessage() for record in caplog.records if "bfloat16" in record.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "decoding in fp32" in lines[0], lines
    # An export of the same run is for the serving machine: bf16 as asked, whatever this one lacks.
    assert TrainedRun.resolve(trained_output_dir, "precision=bf16").for_export().decode_hparams.precision == "bf16"


def test_bfloat16_units_reads_the_cpu_flags(monkeypatch, tmp_path):
    real_open = open

    def cpuinfo_with(flags):
        def fake_open(path, *args, **kwargs):
            if path == "/proc/cpuinfo":
                (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
                return real_open(tmp_path / "cpuinfo", *args, **kwargs)
            return real_open(path, *args, **kwargs)

        return fake_open

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    for flags, expected in (("avx2 avx512f", None), ("avx512f avx512_bf16", "AVX512_BF16"), ("avx512_bf16 amx_bf16", "AMX")):
        monkeypatch.setattr("builtins.open", cpuinfo_with(flags))
        assert system.bfloat16_units() == expected, flags


def test_exported_bf16_shortlist_savedmodel_decodes_as_the_in_process_translator(trained_output_dir, tmp_path, monkeypatch):
    """The exporter writes bf16 even on a machine without bfloat16 units (it is for the serving
    machine): bfloat16 variables, the settings in its metadata, the in-process bf16 outputs;
    and the run's shortlist goes into the graph (one export tests both: exports are slow)."""
    from t2t_keras.serving import exporter

    monkeypatch.setattr(system, "bfloat16_units", lambda: None)
    settings = "beam_size=2,extra_length=8,precision=bf16,shortlist=2,shortlist_frequent=10"
    run = TrainedRun.resolve(trained_output_dir, settings, for_export=True)
    path = exporter.export_run(run, str(tmp_path / "export"))
    exported = Translator.from_preset(path)
    assert {v.dtype for v in tf.saved_model.load(path).variables if v.dtype.is_floating} == {tf.bfloat16}
    assert exported.settings.precision == "bf16"
    sentences = _val_sentences(8)
    in_process = Translator.from_run(run)  # an export's run: bf16 kept
    assert exported.generate(sentences) == in_process.generate(sentences)
    # The search's scores are normalised over each sentence's shortlist: the export's are the shortlist's.
    scores = [[h.score for h in hypotheses] for hypotheses in in_process.translate(sentences[:3], n_best=2)]
    np.testing.assert_allclose([[h.score for h in hypotheses] for hypotheses in exported.translate(sentences[:3], n_best=2)],
                               scores, atol=1e-3)
    without_shortlist = Translator.from_run(run.with_settings(shortlist=0))
    unlisted = [[h.score for h in hypotheses] for hypotheses in without_shortlist.translate(sentences[:3], n_best=2)]
    assert not np.allclose(unlisted, scores, atol=1e-3)

"""Decoding files, batches and the command line with a briefly trained model."""

import codecs
import gzip
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from t2t_keras.token_ids import EOS_ID
from t2t_keras.decoding import file_decoding, line_decoding
from t2t_keras.decoding.hypothesis import EMPTY
from t2t_keras.translator import Translator
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.checkpoints import RunDir, restore_model
from t2t_keras.errors import UsageError
from tests.testing import assert_one_line_error, refusal_probe, run_side_by_side, trained_with_another_vocabulary


def _val(language, count):
    with gzip.open(os.path.join(MULTI30K_DIR, f"val.{language}.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def translator(trained_output_dir):
    run_dir = RunDir(trained_output_dir)
    model, _ = restore_model(run_dir)
    return Translator.from_model(model, run_dir.vocabularies(), beam_size=4, alpha=0.6, extra_length=10, sentences_per_batch=32)


@pytest.fixture(scope="module")
def module(translator):
    """The graphs the translator's calls run (the SavedModel's signatures)."""
    return translator.search_module()


def test_alone_and_in_a_batch_of_32_mixed_lengths_agree(module):
    sentences = _val("en", 32)
    vocabulary = module.vocabularies.source
    encoded = [vocabulary.encode(s) + [EOS_ID] for s in sentences]
    assert len({len(e) for e in encoded}) > 5  # really mixed lengths
    batch = np.zeros([32, max(map(len, encoded))], np.int32)
    for row, ids in enumerate(encoded):
        batch[row, : len(ids)] = ids
    together = module.translate_ids(batch)
    for row in (0, 7, 31):
        alone = module.translate_ids(np.array([encoded[row]], np.int32))
        length = int(alone["lengths"][0, 0])
        np.testing.assert_array_equal(together["ids"][row, 0, :length], alone["ids"][0, 0, :length])
        assert int(together["lengths"][row, 0]) == length
        np.testing.assert_allclose(float(together["scores"][row, 0]), float(alone["scores"][0, 0]), atol=1e-4)


def test_translate_keeps_order_and_empty_lines(translator):
    lines = ["A dog runs.", "", "   ", "Two men are talking in front of a large building with many windows."]
    outputs = translator.generate(lines)
    assert len(outputs) == 4 and outputs[1] == "" and outputs[2] == ""
    assert outputs[0] == translator.generate(["A dog runs."])[0]
    assert outputs[3] == translator.generate([lines[3]])[0]
    assert [[h.text for h in hypotheses] for hypotheses in translator.translate(lines)] == [[text] for text in outputs]


def test_text_signature_equals_python_path(translator, module):
    sentences = _val("en", 5)
    graph = module.translate_text(sentences)
    assert [t.decode("utf-8") for t in graph["outputs"].numpy()] == translator.generate(sentences)
    best = [hypotheses[0] for hypotheses in translator.translate(sentences, log_probs=True)]
    np.testing.assert_allclose(graph["scores"].numpy(), [h.score for h in best], atol=1e-5)
    np.testing.assert_allclose(graph["log_probs"].numpy(), [h.log_prob for h in best], atol=1e-4)


def test_n_best_log_probs_equal_the_score_path(translator, module):
    """Every hypothesis's log-probability from the search equals teacher-forced scoring of it
    (the score signature and --score_file), and the n best come in the search's order."""
    sentences = _val("en", 6) + [""]
    outputs = translator.translate(sentences, n_best=4, log_probs=True)
    assert [len(hypotheses) for hypotheses in outputs] == [4] * 7 and outputs[-1][0].text == ""
    pairs = [(s, h) for s, hypotheses in zip(sentences[:-1], outputs) for h in hypotheses]
    rescored = translator.score([s for s, _ in pairs], [h.text for _, h in pairs])
    np.testing.assert_allclose([h.log_prob for _, h in pairs], rescored, atol=1e-4)
    graph = module.score_text([s for s, _ in pairs], [h.text for _, h in pairs])["log_probs"].numpy()
    np.testing.assert_allclose(graph, rescored, atol=1e-4)
    for hypotheses in outputs[:-1]:
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
        assert len({h.text for h in hypotheses}) > 1
    # Without log-probabilities (the decoder without --with_scores) the rescoring pass is
    # skipped and the search's outputs are the same.
    unscored = translator.translate(sentences, n_best=4)
    assert [[h._replace(log_prob=None) for h in hs] for hs in outputs[:-1]] == unscored[:-1]
    with pytest.raises(UsageError, match="n_best=5: choose 1 to beam_size"):
        translator.translate(["A dog."], n_best=5)


def test_interactive(translator):
    typed, shown = iter(["A dog runs.", ""]), []

    def read(prompt):
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    file_decoding.interactive(translator, read=read, write=shown.append)
    assert shown == translator.generate(["A dog runs.", ""])


def _decoder_cli(*args):
    return subprocess.run([sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", *args], capture_output=True, text=True)


def test_file_with_empty_long_invalid_utf8_and_line_like_characters(trained_output_dir, tmp_path):
    """One output line per input line, each on its input's line. A line is what ends in a
    newline, as `wc -l` and the reference count: a form feed, U+0085, U+2028 or a carriage
    return inside a line (str.splitlines' line ends) stays in it; a UTF-8 byte-order mark is not
    part of the first line."""
    source = tmp_path / "in.en"
    long_line = " ".join(_val("en", 40))  # ~2000 characters
    odd = "A cat\u2028 sleeps\x0c on\x85 a\x0b mat\x1c\x1d\x1e in\r the\u2029 sun."
    source.write_bytes(
        codecs.BOM_UTF8 + b"A dog runs.\n\nTwo women \xff\xfe sing.\n" + long_line.encode() + b"\n\nA man rides a bike.\n"
        + odd.encode() + b"\n"
    )
    reference = tmp_path / "ref.de"
    reference.write_bytes(("Ein Hund rennt.\n\nZwei Frauen singen.\n" + "x\n\nEin Mann fährt Fahrrad.\nEine\u2028 Katze\x0c.\n").encode())
    output = tmp_path / "out.de"
    result = _decoder_cli(f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", f"--decode_to_file={output}",
                          f"--decode_reference={reference}", "--decode_hparams=beam_size=2,extra_length=5")
    assert result.returncode == 0, result.stderr
    lines = output.read_bytes().decode("utf-8").split("\n")
    assert len(lines) == 8 and lines[-1] == ""  # 7 lines, each ending in a newline
    assert lines[1] == "" and lines[4] == ""
    # Each line is what that line translates to on its own (so order is kept).
    run_dir = RunDir(trained_output_dir)
    alone = Translator.from_model(restore_model(run_dir)[0], run_dir.vocabularies(), beam_size=2, extra_length=5)
    for i, text in ((0, "A dog runs."), (2, "Two women \ufffd\ufffd sing."), (3, long_line), (5, "A man rides a bike."), (6, odd)):
        assert lines[i] == alone.generate([text])[0]
    assert "decoded 7 lines" in result.stderr and "(2 empty)" in result.stderr
    assert "invalid UTF-8 replaced on 1 lines: 3" in result.stderr
    assert "BLEU = " in result.stderr and "nrefs:1" in result.stderr


def test_bad_input_is_one_line(trained_output_dir, tmp_path):
    empty = tmp_path / "empty_run"
    empty.mkdir()
    source = tmp_path / "in.en"
    source.write_text("A dog.\n")
    (tmp_path / "two.de").write_text("Ein Hund.\nZwei.\n")
    notes = tmp_path / "notes.de"
    notes.write_text("my precious notes\n")
    (tmp_path / "no_ckpt").mkdir()
    for name in ("hparams.json", "run.json", "vocab.spm.model"):
        shutil.copyfile(os.path.join(trained_output_dir, name), tmp_path / "no_ckpt" / name)
    cases = [
        ([f"--output_dir={empty}", f"--decode_from_file={source}"], "error: " + str(empty / "hparams.json") + " is missing"),
        ([f"--output_dir={tmp_path / 'no_ckpt'}", f"--decode_from_file={source}"], f"error: --output_dir={tmp_path / 'no_ckpt'} has no checkpoint yet; train first"),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", "--decode_hparams=beam_sise=2"],
         "error: --decode_hparams: unknown setting 'beam_sise'; did you mean 'beam_size'? valid: beam_size, alpha, extra_length, min_length, sentences_per_batch, batch_tokens, parallel_parts, constrained, max_input_tokens, sampling_top_k, sampling_temperature, seed, precision, int8_logits, shortlist, shortlist_frequent, exact_search, target_language, markup, alignment_layer, alignment_head, kernel_choices, reverse_weight."),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", "--decode_hparams=return_beams=true"],
         "error: --decode_hparams: unknown setting 'return_beams'; replaced by the decoder's --n_best=N flag"),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", "--n_best=9"], "error: --n_best=9: choose 1 to beam_size (4)."),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", f"--score_file={tmp_path / 'two.de'}"],
         f"error: --score_file={tmp_path / 'two.de'} has 2 lines, --decode_from_file has 1; they must be aligned."),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", "--decode_hparams=beam_size=0"], "error: --decode_hparams: beam_size=0: need beam_size >= 1."),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={tmp_path / 'missing.en'}"], "error: --decode_from_file="),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={tmp_path}"], f"error: --decode_from_file={tmp_path} is a directory; name a text file."),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", f"--ensemble={empty}"], "error: --ensemble="),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", "--decode_shards=2", "--decode_shard_id=2"],
         "error: --decode_shard_id=2: choose 0 to --decode_shards - 1 (1)."),
        ([f"--output_dir={trained_output_dir}"], "error: say what to decode"),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", f"--reverse_model={trained_output_dir}"],
         f"error: --reverse_model={trained_output_dir} translates en -> de; reranking en -> de needs a de -> en model"),
        # A file the decoder did not write is never replaced unasked, as an output or a score file.
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", f"--decode_to_file={notes}"],
         f"error: --decode_to_file={notes} exists and is not a t2t-keras-decoder output (no {notes}.decode.json); it is never replaced unasked"),
        ([f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", f"--score_file={source}", f"--decode_to_file={notes}"],
         f"error: --decode_to_file={notes} exists; it is never replaced unasked"),
    ]
    results = run_side_by_side([[sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", *args] for args, _ in cases])
    for (_, message), result in zip(cases, results):
        assert_one_line_error(result, message)
    assert notes.read_text() == "my precious notes\n"


def test_bad_flags_are_refused_before_tensorflow_loads(trained_output_dir, tmp_path):
    """The decoder checks its flags, the run dir, the decode settings, its input files'
    encodings and its output's directory first: a mistake costs a second, not TensorFlow's
    start-up, and writes nothing (no output, no FILE.decode.json, no .incomplete. file)."""
    source = tmp_path / "in.en"
    source.write_text("A dog.\n")
    # `head -5 test.en | iconv -t utf-16`: read as bytes, its newlines (0A 00) made one line more than it has.
    (tmp_path / "u16.en").write_bytes(codecs.BOM_UTF16_LE + "A dog.\nA cat.\n".encode("utf-16-le"))
    (tmp_path / "nul.de").write_bytes("Ein Hund.\n".encode("utf-16-le"))
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_dir").mkdir()
    run = [f"--output_dir={trained_output_dir}", "--decode_from_file=in.en"]
    u16 = "error: --decode_from_file=u16.en is UTF-16 (little-endian, with a byte-order mark), not UTF-8: "
    cases = [
        ([*run, "--n_best=9"], "error: --n_best=9"),
        ([*run, "--decode_hparams=beam_sise=2"], "error: --decode_hparams: unknown setting 'beam_sise'"),
        ([*run, "--decode_shards=2", "--decode_shard_id=2"], "error: --decode_shard_id=2"),
        ([*run, "--decode_from_file=u16.en", "--decode_to_file=out.de"], u16 + "convert it with iconv -f UTF-16 -t UTF-8 u16.en > u16.utf8.en"),
        ([*run, "--score_file=nul.de"], "error: --score_file=nul.de has NUL bytes, so it is not UTF-8 text; if it is UTF-16 "
         "(little-endian, without a byte-order mark, as the NULs' places suggest), convert it with iconv -f UTF-16LE -t UTF-8 nul.de > nul.utf8.de"),
        ([*run, "--decode_reference=nul.de"], "error: --decode_reference=nul.de has NUL bytes"),
        ([*run, "--decode_to_file=no/such/dir/out.de"],
         "error: --decode_to_file=no/such/dir/out.de: no/such/dir does not exist; create it first, or choose another path."),
        ([*run, "--decode_to_file=no/out.de", "--decode_shards=2", "--decode_shard_id=1"],
         "error: --decode_to_file=no/out.de.shard-1-of-2: no does not exist; create it first, or choose another path."),
        ([*run, "--decode_to_file=a_file/out.de"], f"error: --decode_to_file=a_file/out.de: {tmp_path / 'a_file'} is a file, not a directory"),
        ([*run, "--decode_to_file=a_dir"], "error: --decode_to_file=a_dir is a directory; name a file."),
    ]
    before = sorted(os.listdir(tmp_path))
    # Run in tmp_path: the paths as a user types them, relative.
    results = run_side_by_side([refusal_probe("decoder", "--noprogress", *args) for args, _ in cases], cwd=tmp_path)
    for (args, message), result in zip(cases, results):
        assert_one_line_error(result, message)
        assert result.stdout.split() == ["2", "False"], (args, result.stdout, result.stderr)
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / "a_dir") == []


def test_n_best_with_scores_and_score_file_on_the_command_line(trained_output_dir, tmp_path):
    source = tmp_path / "in.en"
    source.write_text("A dog runs.\n\nTwo women sing.\n")
    output = tmp_path / "nbest.de"
    run = [f"--output_dir={trained_output_dir}", f"--decode_from_file={source}", "--decode_hparams=beam_size=3,extra_length=8"]
    result = _decoder_cli(*run, f"--decode_to_file={output}", "--n_best=3", "--with_scores", "--with_log_probs")
    assert result.returncode == 0, result.stderr
    lines = output.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 9 and lines[3:6] == ["0.0000\t0.0000\t"] * 3  # 3 per input line; the empty one scores 0
    search_scores, scores, texts = zip(*(line.split("\t", 2) for line in lines))
    # The two columns are the Python API's Hypothesis.score and .log_prob, the n best in the score's order.
    hypotheses = Translator.from_preset(trained_output_dir, beam_size=3, extra_length=8).translate(
        ["A dog runs.", "", "Two women sing."], n_best=3, log_probs=True)
    expected = [(h.score, h.log_prob, h.text) for line in hypotheses for h in line]
    np.testing.assert_allclose([[float(s), float(p)] for s, p in zip(search_scores, scores)],
                               [[s, p] for s, p, _ in expected], atol=2e-4)
    assert list(texts) == [text for _, _, text in expected]
    assert [float(s) for s in search_scores[:3]] == sorted((float(s) for s in search_scores[:3]), reverse=True)
    # The first and second best of the first line, the third of the last, scored as given pairs.
    (tmp_path / "sources.en").write_text("A dog runs.\nA dog runs.\nTwo women sing.\n")
    (tmp_path / "targets.de").write_text("".join(texts[i] + "\n" for i in (0, 1, 8)), encoding="utf-8")
    run[1] = f"--decode_from_file={tmp_path / 'sources.en'}"
    rescored = _decoder_cli(*run, f"--score_file={tmp_path / 'targets.de'}")
    assert rescored.returncode == 0, rescored.stderr
    assert "scored 3 pairs" in rescored.stderr
    np.testing.assert_allclose([float(x) for x in rescored.stdout.split()], [float(scores[i]) for i in (0, 1, 8)], atol=2e-4)


def test_the_searchs_score_of_its_best_ids_is_their_log_probability(trained_output_dir):
    """With alpha 0 the search ranks by log P itself: its score of each best hypothesis equals
    teacher-forced log P of exactly those ids (not re-tokenised text) under the model."""
    run_dir = RunDir(trained_output_dir)
    module = Translator.from_model(restore_model(run_dir)[0], run_dir.vocabularies(), beam_size=3, alpha=0.0,
                                   extra_length=8).search_module()
    vocabulary = module.vocabularies.source
    batch = line_decoding.padded_batch([vocabulary.encode(s, add_eos=True) for s in _val("en", 8)])
    found = module.translate_ids(batch)
    best = found["ids"].numpy()[:, 0]
    scored = module.score_ids(batch, best)
    np.testing.assert_allclose(scored["log_probs"].numpy(), found["scores"].numpy()[:, 0], atol=1e-4)
    np.testing.assert_array_equal(scored["lengths"].numpy(), found["lengths"].numpy()[:, 0])


def test_an_empty_source_scores_0_on_every_path(translator, module):
    assert translator.translate(["", "A dog."], n_best=2)[0] == [EMPTY] * 2
    assert translator.score(["", "  "], ["", "Ein Hund."]) == [0.0, 0.0]
    np.testing.assert_array_equal(module.score_text(["", "  "], ["", "Ein Hund."])["log_probs"].numpy(), [0.0, 0.0])
    assert translator.score(["A dog."], [""])[0] < 0  # an empty translation of a real sentence is a real event
    for method in (translator.translate, translator.generate, lambda s: translator.score(s, ["x"])):
        with pytest.raises(TypeError, match=r"takes a list of sentences, e\.g\. .*not a string"):
            method("A dog runs.")


def test_an_ensemble_of_a_model_with_itself_is_that_model(trained_output_dir, tmp_path):
    single = Translator.from_preset(trained_output_dir, beam_size=3, extra_length=8)
    doubled = Translator.from_preset(trained_output_dir, beam_size=3, extra_length=8, ensemble=[trained_output_dir])
    assert len(doubled.checkpoint_paths) == 2
    batch = line_decoding.padded_batch([single.vocabularies.source.encode(s, add_eos=True) for s in _val("en", 6)])
    ours, theirs = doubled.search_module().translate_ids(batch), single.search_module().translate_ids(batch)
    np.testing.assert_array_equal(ours["ids"].numpy(), theirs["ids"].numpy())
    np.testing.assert_allclose(ours["scores"].numpy(), theirs["scores"].numpy(), atol=1e-4)

    # A model with another vocabulary is refused, naming it, before anything is restored.
    from t2t_keras.data.tokenizers import train_sentencepiece

    other = tmp_path / "other"
    shutil.copytree(trained_output_dir, other)
    trained_with_another_vocabulary(other, train_sentencepiece(_val("en", 300) + _val("de", 300), 600))
    with pytest.raises(UsageError, match=r"--ensemble=.*other: its vocabulary \(\d+ pieces, not 8000\) is not the first model.s"):
        Translator.from_preset(trained_output_dir, ensemble=[str(other)])

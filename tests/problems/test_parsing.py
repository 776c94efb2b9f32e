"""The Penn Treebank parsing problems: reading, datagen, decoding and scoring end to end."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from t2t_keras import registry
from t2t_keras.checkpoints import RunDir, restore_model
from t2t_keras.data import datagen
from t2t_keras.hparams_lib import DecodeHParams
from t2t_keras.data.text_files import TextStats
from t2t_keras.decoding.line_decoding import padded_batch
from t2t_keras.parsing.trees import read_trees
from t2t_keras.parsing.trees import PTB_LABELS
from t2t_keras.errors import UsageError
from t2t_keras.problems import parsing_english
from t2t_keras.problems.parsing_english import CHECKOUT_PTB_SAMPLE_DIR
from t2t_keras.training import trainer
from t2t_keras.training.evaluator import Evaluator
from tests.testing import assert_one_line_error


def _cli(module, *args):
    return subprocess.run([sys.executable, "-m", f"t2t_keras.bin.{module}", *args], capture_output=True, text=True)


def test_registered_with_the_papers_settings():
    wsj = registry.problem("parsing_english_wsj")
    assert wsj.vocab_spec.size == 16000 and wsj.splits == ["train", "dev", "test"]
    decode = wsj.decode_defaults
    assert (decode.beam_size, decode.alpha, decode.extra_length) == (21, 0.3, 300)
    hparams = registry.hparams("transformer_parsing")
    assert (hparams.num_hidden_layers, hparams.hidden_size, hparams.filter_size, hparams.num_heads) == (4, 1024, 2048, 8)
    assert registry.hparams("transformer_parsing_tiny").num_hidden_layers == 4


def test_first_pair_of_the_sample():
    problem = registry.problem("parsing_english_ptb_sample")
    source, target = next(iter(problem.text_pairs("train", None, TextStats())))
    assert source == "Pierre Vinken , 61 years old , will join the board as a nonexecutive director Nov. 29 ."
    assert target == (
        "(S (NP (NP XX XX ) XX (ADJP (NP XX XX ) XX ) XX ) (VP XX (VP XX (NP XX XX ) (PP XX (NP XX XX XX ) ) "
        "(NP XX XX ) ) ) XX )"
    )


def test_wsj_splits_by_section(tmp_path):
    for section, number in (("02", "0200"), ("21", "2199"), ("22", "2201"), ("23", "2300"), ("24", "2400")):
        os.makedirs(tmp_path / section)
        shutil.copyfile(os.path.join(CHECKOUT_PTB_SAMPLE_DIR, "wsj_0001.mrg"), tmp_path / section / f"wsj_{number}.mrg")
    problem = registry.problem("parsing_english_wsj")
    names = {split: [os.path.basename(p) for p in problem.mrg_files(split, str(tmp_path))] for split in problem.splits}
    assert names == {"train": ["wsj_0200.mrg", "wsj_2199.mrg"], "dev": ["wsj_2201.mrg"], "test": ["wsj_2300.mrg"]}


def sample_slice(directory) -> str:
    """wsj_0001-0019 (train, 212 trees) and wsj_0160-0164 (dev, 67) of the shipped sample, for speed."""
    os.makedirs(directory, exist_ok=True)
    for number in (*range(1, 20), *range(160, 165)):
        shutil.copyfile(os.path.join(CHECKOUT_PTB_SAMPLE_DIR, f"wsj_{number:04d}.mrg"), os.path.join(directory, f"wsj_{number:04d}.mrg"))
    return str(directory)


def wsj_layout(directory) -> str:
    """Sample files renamed into the LDC layout parsed/mrg/wsj/SS/wsj_SSNN.mrg: sections 02-03
    (train), 22 (dev), 23 (test) and 24 (never read)."""
    sections = {"02": range(1, 11), "03": range(11, 20), "22": range(160, 163), "23": range(163, 165), "24": range(165, 166)}
    for section, numbers in sections.items():
        folder = os.path.join(directory, "parsed", "mrg", "wsj", section)
        os.makedirs(folder)
        for position, number in enumerate(numbers):
            shutil.copyfile(os.path.join(CHECKOUT_PTB_SAMPLE_DIR, f"wsj_{number:04d}.mrg"), os.path.join(folder, f"wsj_{section}{position:02d}.mrg"))
    return str(directory)


def test_the_repository_holds_the_samples_train_and_dev_files_only(tmp_path, monkeypatch):
    import nltk

    names = sorted(os.listdir(CHECKOUT_PTB_SAMPLE_DIR))
    assert names == [f"wsj_{number:04d}.mrg" for number in range(1, 180)]  # 0180-0199, the test files, are not kept
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])  # no NLTK copy: the checkout's is read
    problem = registry.problem("parsing_english_ptb_sample")
    assert [len(problem.mrg_files(split, None)) for split in problem.splits] == [159, 20]


def test_the_sample_is_read_from_tmp_dir_else_nltk_data_else_the_checkout(tmp_path, monkeypatch):
    import nltk

    problem = registry.problem("parsing_english_ptb_sample_words")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")])
    assert problem.mrg_dir(None) == CHECKOUT_PTB_SAMPLE_DIR
    nltk_copy = sample_slice(tmp_path / "nltk_data" / "corpora" / "treebank" / "combined")  # nltk.download("treebank")'s place
    assert problem.mrg_dir(None) == nltk_copy
    assert problem.mrg_dir(str(tmp_path / "mine")) == str(tmp_path / "mine")
    # An installed wheel: no checkout copy, and nothing downloaded.
    monkeypatch.setattr(parsing_english, "CHECKOUT_PTB_SAMPLE_DIR", str(tmp_path / "site-packages" / "data" / "ptb_sample"))
    assert problem.mrg_dir(None) == nltk_copy
    shutil.rmtree(nltk_copy)
    with pytest.raises(UsageError) as raised:
        problem.mrg_dir(None)
    assert str(raised.value) == (
        "parsing_english_ptb_sample_words reads NLTK's Penn Treebank sample, which the installed package does not ship: "
        "run python -m nltk.downloader treebank, or pass --tmp_dir=DIR holding its wsj_*.mrg files."
    )


def test_datagen_writes_shards_and_the_dev_words_and_gold_trees(tmp_path):
    problem = registry.problem("parsing_english_ptb_sample")
    manifest = datagen.generate(problem, str(tmp_path), sample_slice(tmp_path / "raw"), progress=False)
    assert manifest["splits"]["train"]["pairs"] == 212 and manifest["splits"]["dev"]["pairs"] == 67
    words = (tmp_path / "parsing_english_ptb_sample-dev.words").read_text().splitlines()
    trees = read_trees(str(tmp_path / "parsing_english_ptb_sample-dev.trees"))
    assert len(words) == len(trees) == 67
    assert all(line == " ".join(tree.leaves()) for line, tree in zip(words, trees))

    # A vocabulary per side: source pieces that keep most words whole, and the tree's symbols
    # as whole-word pieces on the target side (what the constrained search reads).
    vocabularies = problem.load_vocabularies(str(tmp_path))
    assert not vocabularies.shared and manifest["target_vocab"]["sha256"] == vocabularies.target.sha256
    symbols = set(vocabularies.target.pieces(range(3, vocabularies.target.size)))
    assert {"▁XX", "▁)", "▁(S", "▁(NP", "▁(VP"} <= symbols and all(p == "▁)" or p == "▁XX" or p.startswith("▁(") for p in symbols)
    train_sources = [source for source, _ in problem.text_pairs("train", str(tmp_path / "raw"), TextStats())]
    pieces = sum(len(vocabularies.source.encode(line)) for line in train_sources)
    assert pieces < 1.1 * sum(len(line.split()) for line in train_sources), pieces
    target_ids = vocabularies.target.encode("(S (NP XX XX ) XX )")
    assert vocabularies.target.pieces(target_ids) == ["▁(S", "▁(NP", "▁XX", "▁XX", "▁)", "▁XX", "▁)"]


def test_bad_input_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(
        _cli("datagen", "--noprogress", "--problem=parsing_english_wsj", f"--data_dir={tmp_path / 'd1'}", f"--tmp_dir={empty}"),
        f"error: --tmp_dir={empty} has no wsj_NNNN.mrg files",
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copyfile(os.path.join(CHECKOUT_PTB_SAMPLE_DIR, "wsj_0001.mrg"), broken / "wsj_0001.mrg")
    (broken / "wsj_0002.mrg").write_text("( (S (NP-SBJ (NNP Mr.) (NNP Vinken) ) (VP (VBZ is) )\n")
    assert_one_line_error(
        _cli("datagen", "--noprogress", "--problem=parsing_english_ptb_sample", f"--data_dir={tmp_path / 'd2'}", f"--tmp_dir={broken}"),
        f"error: {broken / 'wsj_0002.mrg'}: tree 1 is malformed",
    )
    assert not (tmp_path / "d2" / "parsing_english_ptb_sample.manifest.json").exists()


def test_copy_positions_need_targets_that_copy_the_source(tmp_path):
    problem = registry.problem("parsing_english_ptb_sample")  # XX targets: no copies
    data_dir = tmp_path / "data"
    raw = sample_slice(tmp_path / "raw")
    datagen.generate(problem, str(data_dir), raw, progress=False)
    assert_one_line_error(
        _cli("trainer", f"--problem={problem.name}", "--hparams_set=transformer_parsing_tiny", "--hparams=copy_position_encoding=true",
             f"--data_dir={data_dir}", f"--output_dir={tmp_path / 'train'}", "--train_steps=1"),
        "error: copy_position_encoding=true needs targets that copy the source; parsing_english_ptb_sample's do not",
    )
    words = registry.problem("parsing_english_ptb_sample_words")
    datagen.generate(words, str(tmp_path / "words"), raw, progress=False)
    vocabularies = words.load_vocabularies(str(tmp_path / "words"))
    structure = words.structure_tokens(vocabularies)
    pieces = vocabularies.target.pieces(structure)
    assert len(structure) == len(PTB_LABELS) + 2 and "</s>" in pieces and "\u2581)" in pieces and "\u2581(NP" in pieces


def test_closing_labels_are_single_pieces_and_every_gold_tree_passes_the_filter(tmp_path):
    """With the problem's own vocabulary, each dev tree's target, token by token, is what the
    constrained search allows: the filter never forbids a gold tree."""
    import tensorflow as tf

    from t2t_keras.parsing.trees import linearize

    problem = registry.problem("parsing_english_ptb_sample_words_closing_labels")
    raw = sample_slice(tmp_path / "raw")
    datagen.generate(problem, str(tmp_path / "data"), raw, progress=False)
    vocabularies = problem.load_vocabularies(str(tmp_path / "data"))
    structure = vocabularies.target.pieces(problem.structure_tokens(vocabularies))
    assert len(structure) == 2 * len(PTB_LABELS) + 2 and "\u2581)NP" in structure and "\u2581)S" in structure
    pairs = list(problem.text_pairs("dev", raw, TextStats()))
    assert all(")" not in target.split() for _, target in pairs)  # every closing labelled
    trees = [tree for _, tree in problem.trees("dev", raw)]
    assert [target for _, target in pairs] == [linearize(tree, words=True, closing_labels=True) for tree in trees]
    # The first 20 trees as one batch (beam 1), token by token, as the search steps them.
    sources = [vocabularies.source.encode(source, add_eos=True) for source, _ in pairs[:20]]
    targets = [vocabularies.target.encode(target, add_eos=True) for _, target in pairs[:20]]
    target_ids, lengths = padded_batch(targets), np.array([len(ids) for ids in targets], np.int32)
    token_filter = problem.token_filter(vocabularies)
    state = token_filter.initial_state(tf.constant(padded_batch(sources)), 1)
    for step in range(target_ids.shape[1]):
        if step:
            state = token_filter.update(state, tf.constant(target_ids[:, step - 1]))
        allowed = token_filter.allowed(state, tf.constant(lengths - step)).numpy()
        for row in np.flatnonzero(step < lengths):
            assert allowed[row, target_ids[row, step]], (pairs[row][1], step)


@pytest.mark.slow
@pytest.mark.parametrize("problem_name, hparams_set, raw", [
    ("parsing_english_ptb_sample", "transformer_parsing_tiny", sample_slice),
    ("parsing_english_wsj_words", "transformer_parsing_wsj", wsj_layout),
])
def test_train_decode_and_score_end_to_end(tmp_path, problem_name, hparams_set, raw):
    """A briefly trained parser, in both linearisations (the words one as the WSJ recipe, on a
    folder in the LDC layout): every output line is a tree over its input words; EVALB is printed."""
    import tensorflow as tf

    problem = registry.problem(problem_name)
    data_dir, output_dir = tmp_path / "data", tmp_path / "train"
    record = datagen.generate(problem, str(data_dir), raw(tmp_path / "raw"), progress=False)
    if problem_name == "parsing_english_wsj_words":
        assert set(record["splits"]) == {"train", "dev", "test"} and record["splits"]["dev"]["pairs"] == 53
    # The set's own recipe (pre-norm, copy positions for the words linearisation), narrowed for a CPU test.
    overrides = "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=2,tokens_per_batch=2048,learning_rate_warmup_steps=20"
    hparams = registry.hparams(hparams_set, overrides)
    assert hparams.copy_position_encoding == problem.copy_words
    settings = trainer.RunSettings(output_dir=str(output_dir), data_dir=str(data_dir), train_steps=20,
                                   save_checkpoints_steps=20, log_steps=20, evaluate=False)
    trainer.train(problem, hparams, settings, tf.distribute.OneDeviceStrategy("/cpu:0"))
    words = (data_dir / f"{problem_name}-dev.words").read_text().splitlines()[:6]
    gold = [line for line in (data_dir / f"{problem_name}-dev.trees").read_text().splitlines()[:6]]
    (tmp_path / "dev.words").write_text("\n".join(words) + "\n")
    (tmp_path / "dev.trees").write_text("\n".join(gold) + "\n")
    result = _cli(
        "decoder", f"--output_dir={output_dir}", f"--decode_from_file={tmp_path / 'dev.words'}",
        f"--decode_to_file={tmp_path / 'dev.parsed'}", f"--decode_reference={tmp_path / 'dev.trees'}",
        "--decode_hparams=beam_size=2,extra_length=30", "--noprogress",
    )
    assert result.returncode == 0, result.stderr
    parsed = read_trees(str(tmp_path / "dev.parsed"))
    assert [tree.leaves() for tree in parsed] == [line.split() for line in words]
    assert "EVALB all: F1 " in result.stderr and "(6 sentences, 0 errors)" in result.stderr
    assert "repairs" not in result.stderr  # the constrained search only ever finishes trees
    decoder_f1 = float(re.search(r"EVALB all: F1 ([\d.]+)", result.stderr).group(1))

    if problem.copy_words:
        return  # the dev score's path below is the same for both linearisations
    # The trainer's dev score: EVALB F1 of the same decoding (never BLEU of tree strings).
    model, _ = restore_model(RunDir(str(output_dir)))
    evaluator = Evaluator(
        problem, str(data_dir), model, problem.load_vocabularies(str(data_dir)), hparams, tf.distribute.OneDeviceStrategy("/cpu:0"),
        eval_steps=1, score_sentences=6, decode_hparams=DecodeHParams(beam_size=2, alpha=0.3, extra_length=30),
    )
    metrics = evaluator.evaluate()
    assert "bleu" not in metrics
    assert metrics["f1"] == pytest.approx(decoder_f1, abs=0.01)

"""translate_text: a user's own files through the commands alone, no Python; bad files; mixed corpora."""

import gzip
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.data import datagen
from t2t_keras.errors import UsageError
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.token_ids import EOS_ID
from tests.testing import assert_one_line_error

TINY = "hidden_size=32,filter_size=64,num_heads=2,tokens_per_batch=1024,max_length=64,learning_rate_warmup_steps=20"


def _multi30k(language, split="train"):
    with gzip.open(os.path.join(MULTI30K_DIR, f"{split}.{language}.gz"), "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def _write(path, lines, compress=False):
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two train corpora (the first gzipped on the target side), a dev pair and a test file."""
    root = tmp_path_factory.mktemp("corpus")
    en, de = _multi30k("en"), _multi30k("de")
    _write(root / "a.en", en[:1500])
    _write(root / "a.de.gz", de[:1500], compress=True)
    _write(root / "b.en", en[1500:3000])
    _write(root / "b.de.gz", de[1500:3000], compress=True)
    _write(root / "dev.en", _multi30k("en", "val")[:100])
    _write(root / "dev.de", _multi30k("de", "val")[:100])
    _write(root / "test.en", _multi30k("en", "val")[100:110])
    return root


def _cli(module, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", f"t2t_keras.bin.{module}", *args], capture_output=True, text=True, cwd=cwd)


def _problem(**values):
    problem = registry.problem("translate_text")
    return problem.configure(problem.settings_from_flags(values))


@pytest.fixture(scope="module")
def text_run(corpus, tmp_path_factory):
    """datagen and trainer on the corpus with nothing but flags (two pairs of files, one
    gzipped, one given as a glob): (data_dir, output_dir)."""
    root = tmp_path_factory.mktemp("text_run")
    data, run = root / "data", root / "run"
    result = _cli("datagen", "--problem=translate_text", f"--data_dir={data}", "--train_source=a.en,b.en",
                  "--train_target=*.de.gz", "--dev_source=dev.en", "--dev_target=dev.de", "--vocab_size=1000",
                  "--target_language=de", "--noprogress", cwd=corpus)
    assert result.returncode == 0, result.stderr
    assert "train: 3000 pairs in 10 shards" in result.stdout and "dev: 100 pairs in 1 shards" in result.stdout
    result = _cli("trainer", "--problem=translate_text", f"--data_dir={data}", "--hparams_set=transformer_tiny",
                  f"--hparams={TINY}", f"--output_dir={run}", "--train_steps=6", "--save_checkpoints_steps=6",
                  "--eval_sentences=0", "--export_saved_model")
    assert result.returncode == 0, result.stderr
    assert f"exported {run / 'export' / '6'}" in result.stdout
    return data, run


@pytest.mark.slow
def test_two_text_files_to_translations_with_the_commands_alone(corpus, text_run, tmp_path):
    """datagen -> trainer -> decoder with nothing but flags; the trainer's export (through
    Translator.from_preset) serves what the decoder wrote."""
    _, run = text_run
    result = _cli("decoder", f"--output_dir={run}", f"--decode_from_file={corpus / 'test.en'}",
                  f"--decode_to_file={tmp_path / 'test.de'}", "--noprogress")
    assert result.returncode == 0, result.stderr
    decoded = (tmp_path / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(decoded) == 10

    from t2t_keras.checkpoints import RunDir
    from t2t_keras.translator import Translator

    recorded = RunDir(run).problem()
    assert recorded.name == "translate_text" and recorded.target_language == "de"
    assert recorded.settings["train"] == [[str(corpus / "a.en"), str(corpus / "a.de.gz")],
                                          [str(corpus / "b.en"), str(corpus / "b.de.gz")]]
    exported = Translator.from_preset(str(run / "export"))
    assert exported.generate(_multi30k("en", "val")[100:110]) == decoded


def test_settings_are_recorded_and_a_rerun_with_other_files_is_refused(corpus, tmp_path):
    data = str(tmp_path / "data")
    problem = _problem(train_source=f"{corpus}/a.en", train_target=f"{corpus}/a.de.gz",
                       dev_source=f"{corpus}/dev.en", dev_target=f"{corpus}/dev.de", vocab_size=500)
    record = datagen.generate(problem, data, None, progress=False)
    assert record["settings"] == problem.settings and record["vocab"]["size"] <= 500
    assert datagen.generate(problem, data, None, progress=False)["reused"]
    trainer_side = registry.problem("translate_text").configure_from_data_dir(data)
    assert trainer_side.settings == problem.settings
    other = _problem(train_source=f"{corpus}/b.en", train_target=f"{corpus}/b.de.gz",
                     dev_source=f"{corpus}/dev.en", dev_target=f"{corpus}/dev.de", vocab_size=500)
    with pytest.raises(UsageError, match=r"holds translate_text data made with other train; use --overwrite"):
        datagen.generate(other, data, None, progress=False)


def test_bad_files_are_one_line_errors_naming_file_and_line(corpus, tmp_path):
    dev = {"dev_source": f"{corpus}/dev.en", "dev_target": f"{corpus}/dev.de"}

    def generate(source_lines, target_lines, raw_target=None):
        source = _write(tmp_path / "bad.en", source_lines)
        target = tmp_path / "bad.de"
        if raw_target is not None:
            target.write_bytes(raw_target)
        else:
            _write(target, target_lines)
        problem = _problem(train_source=source, train_target=str(target), **dev)
        datagen.generate(problem, str(tmp_path / "data"), None, overwrite=True, progress=False)

    with pytest.raises(UsageError, match=r"bad.en has more lines than .*bad.de \(line 3 has no partner\)"):
        generate(["a", "b", "c"], ["x", "y"])
    with pytest.raises(UsageError, match=r"--train_source=.*bad.en is empty; name a file with at least one line"):
        generate([], [])
    # Found from the flags alone, before datagen writes anything: an empty dev file.
    with pytest.raises(UsageError, match=r"--dev_target=.*empty.de is empty"):
        _problem(train_source=f"{corpus}/a.en", train_target=f"{corpus}/a.de.gz", dev_source=f"{corpus}/dev.en",
                 dev_target=_write(tmp_path / "empty.de", []))
    with pytest.raises(UsageError, match=r"bad.de:2: not UTF-8 \(byte 0xe9 at column 4\); convert the file to UTF-8"):
        generate(["a", "b"], None, raw_target="ok\ncaf\xe9\n".encode("latin-1"))
    whole = gzip.compress("".join(f"line {i}\n" for i in range(1000)).encode())
    (tmp_path / "broken.de.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UsageError, match=r"broken.de.gz: cannot be read after line \d+ .*complete gzip file"):
        problem = _problem(train_source=_write(tmp_path / "ok.en", ["x"] * 1000), train_target=str(tmp_path / "broken.de.gz"), **dev)
        datagen.generate(problem, str(tmp_path / "data"), None, overwrite=True, progress=False)
    with pytest.raises(UsageError, match=r"--train_source: no file matches 'nothing\*.en'"):
        _problem(train_source="nothing*.en", train_target="x", **dev)
    with pytest.raises(UsageError, match=r"--train_source names 2 files and --train_target 1; they pair in order"):
        _problem(train_source=f"{corpus}/a.en,{corpus}/b.en", train_target=f"{corpus}/a.de.gz", **dev)
    with pytest.raises(UsageError, match=r"--train_source=.* is a directory; name its text files"):
        _problem(train_source=str(corpus), train_target=f"{corpus}/a.de.gz", **dev)
    with pytest.raises(UsageError, match=r"a vocabulary of 100 pieces is too small for this text: .* choose a size of at least"):
        problem = _problem(train_source=f"{corpus}/a.en", train_target=f"{corpus}/a.de.gz", vocab_size=100, **dev)
        datagen.generate(problem, str(tmp_path / "data"), None, overwrite=True, progress=False)
    with pytest.raises(UsageError, match=r"needs --dev_source, --dev_target"):
        _problem(train_source=f"{corpus}/a.en", train_target=f"{corpus}/a.de.gz")

    # The same through the command: one line, and no data_dir left behind.
    result = _cli("datagen", "--problem=translate_text", f"--data_dir={tmp_path / 'new'}", f"--train_source={corpus}/a.en",
                  f"--train_target={corpus}/missing.de", f"--dev_source={corpus}/dev.en", f"--dev_target={corpus}/dev.de")
    assert_one_line_error(result, "error: --train_target=")
    assert "missing.de: no such file" in result.stderr and not (tmp_path / "new").exists()
    # A failure found while writing (a .gz cut short) leaves the data_dir as it was: only the user's file.
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine\n")
    result = _cli("datagen", "--problem=translate_text", f"--data_dir={tmp_path / 'kept'}", f"--train_source={corpus}/a.en",
                  f"--train_target={corpus}/a.de.gz", f"--dev_source={tmp_path / 'ok.en'}", f"--dev_target={tmp_path / 'broken.de.gz'}",
                  "--vocab_size=1000", "--noprogress")
    assert_one_line_error(result, f"error: {tmp_path / 'broken.de.gz'}: cannot be read after line")
    assert os.listdir(tmp_path / "kept") == ["notes.txt"]
    result = _cli("datagen", "--problem=translate_ende_multi30k", f"--data_dir={tmp_path / 'new'}", "--train_source=a.en")
    assert_one_line_error(result, "error: --train_source configure --problem=translate_text; translate_ende_multi30k is defined")


def test_concatenated_corpora_are_mixed_from_the_first_batches(tmp_path):
    """A's 5000 pairs then B's 5000 in one file: the first 1000 training examples hold 40-60% of each,
    with a shuffle buffer (2000) smaller than the split, so the bounded-memory path runs."""
    en, de = _multi30k("en"), _multi30k("de")
    source = _write(tmp_path / "train.en", en[:10000])
    target = _write(tmp_path / "train.de", de[:10000])
    dev = {"dev_source": _write(tmp_path / "dev.en", en[-50:]), "dev_target": _write(tmp_path / "dev.de", de[-50:])}
    problem = _problem(train_source=source, train_target=target, vocab_size=1000, **dev)
    data = str(tmp_path / "data")
    record = datagen.generate(problem, data, None, progress=False, shuffle_buffer=2000)
    assert record["splits"]["train"]["pairs"] == 10000
    assert not [name for name in os.listdir(data) if "incomplete" in name or "shuffle" in name]

    vocabulary = problem.load_vocabularies(data).source
    first_a = {tuple(vocabulary.encode(line, add_eos=True)) for line in en[:5000]}
    seen = []
    for batch in problem.dataset("train", data, tokens_per_batch=1024, training=True, seed=1):
        seen += [tuple(int(i) for i in row if i) for row in batch["inputs"].numpy()]
        if len(seen) >= 1000:
            break
    share_a = sum(row in first_a for row in seen[:1000]) / 1000
    assert 0.4 <= share_a <= 0.6, share_a


def test_shuffled_splits_are_permutations_and_reproducible(tmp_path):
    rng = lambda: __import__("numpy").random.default_rng(7)  # noqa: E731
    records = [f"record {i}".encode() for i in range(5000)]
    in_memory = list(datagen.shuffle_pairs(iter(records), 10_000, rng(), str(tmp_path / "s")))
    spilled = list(datagen.shuffle_pairs(iter(records), 100, rng(), str(tmp_path / "s")))  # dealt twice: 5000 / 64 > 100 / 2
    again = list(datagen.shuffle_pairs(iter(records), 100, rng(), str(tmp_path / "s")))
    assert sorted(in_memory) == sorted(spilled) == sorted(records)
    assert spilled == again and spilled != records and in_memory != records
    assert os.listdir(tmp_path) == []  # the temporary files are gone
    # No position keeps its neighbour: the first 500 outputs come from all over the input.
    first = sorted(int(r.split()[1]) for r in spilled[:500])
    assert first[0] < 100 and first[-1] > 4900


def test_vocab_model_gives_that_models_ids(corpus, tmp_path):
    import sentencepiece

    from t2t_keras.data.tokenizers import train_sentencepiece

    en, de = _multi30k("en"), _multi30k("de")
    model_path = tmp_path / "given.model"
    model_path.write_bytes(train_sentencepiece(en[5000:7000] + de[5000:7000], 700))
    problem = _problem(train_source=f"{corpus}/a.en", train_target=f"{corpus}/a.de.gz",
                       dev_source=f"{corpus}/dev.en", dev_target=f"{corpus}/dev.de")
    from t2t_keras.data.tokenizers import given_vocabularies

    data = str(tmp_path / "data")
    datagen.generate(problem, data, None, progress=False, vocabularies=given_vocabularies(str(model_path)))
    assert (tmp_path / "data" / "translate_text.spm.model").read_bytes() == model_path.read_bytes()
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
    held_out = _multi30k("en", "val")[200:260] + _multi30k("de", "val")[200:260] + ["Zoë's naïve café: 42 €"]
    in_graph = problem.load_vocabularies(data).source.tf_tokenizer().tokenize(tf.constant(held_out)).to_list()
    assert in_graph == [processor.encode(line) + [EOS_ID] for line in held_out]

    default_ids = tmp_path / "default.model"  # sentencepiece's own defaults: unk 0, bos 1, eos 2
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(en[:2000]), model_prefix=str(tmp_path / "default"),
                                             vocab_size=300, minloglevel=2)
    with pytest.raises(UsageError, match=r"has ids pad -1, eos 2, unk 0; t2t-keras needs pad 0, eos 1, unk 2"):
        given_vocabularies(str(default_ids))
    other = tmp_path / "other.model"
    other.write_bytes(train_sentencepiece(de[:2000], 600))
    with pytest.raises(UsageError, match=r"names two models, but translate_ende_multi30k shares one vocabulary"):
        datagen.generate(registry.problem("translate_ende_multi30k"), str(tmp_path / "m"), None, progress=False,
                         vocabularies=given_vocabularies(f"{model_path},{other}"))

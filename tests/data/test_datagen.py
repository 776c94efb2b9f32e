"""Datagen end to end: determinism, atomicity, reuse, and bad input."""

import codecs
import filecmp
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from t2t_keras import registry
from t2t_keras.data import datagen, manifest
from t2t_keras.data.text_files import TextStats, check_text_file, count_lines, read_lines
from t2t_keras.data.tfrecords import count_and_check
from t2t_keras.errors import UsageError
from t2t_keras.problem import VocabSpec
from t2t_keras.problems.translate import ParallelTextProblem
from tests.testing import assert_one_line_error, interrupt_while, refusal_probe, run_side_by_side, write_corpus_slice


class SliceProblem(ParallelTextProblem):
    """The first lines of the shipped Multi30k, from files in tmp_dir."""

    name = "translate_ende_slice"
    source_language, target_language = "en", "de"
    vocab_spec = VocabSpec(size=1000)
    num_shards = {"train": 2, "dev": 1}
    files = {"train": ("train.en", "train.de"), "dev": ("dev.en", "dev.de")}


@pytest.fixture
def slice_tmp_dir(tmp_path):
    return write_corpus_slice(tmp_path / "raw")


def _files(directory):
    return sorted(os.listdir(directory))


def test_slice_end_to_end(slice_tmp_dir, tmp_path):
    record = datagen.generate(SliceProblem(), str(tmp_path / "data"), slice_tmp_dir, progress=False)
    assert record["splits"]["train"]["pairs"] == 2000 and record["splits"]["dev"]["pairs"] == 100
    assert _files(tmp_path / "data") == [
        "translate_ende_slice-dev-00000-of-00001",
        "translate_ende_slice-train-00000-of-00002",
        "translate_ende_slice-train-00001-of-00002",
        "translate_ende_slice.manifest.json",
        "translate_ende_slice.spm.model",
    ]
    shards = manifest.shard_files(SliceProblem(), str(tmp_path / "data"), "train")
    assert count_and_check(shards) == 2000
    summary = datagen.format_summary(record)
    assert "train: 2000 pairs in 2 shards; dropped: none" in summary
    assert "source tokens p50/p90/p99/max:" in summary


def test_two_runs_are_byte_identical(slice_tmp_dir, tmp_path):
    for name in ("a", "b"):
        datagen.generate(SliceProblem(), str(tmp_path / name), slice_tmp_dir, progress=False)
    names = _files(tmp_path / "a")
    assert names == _files(tmp_path / "b")
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", names, shallow=False)
    assert mismatch == [] and errors == [] and len(match) == 5


def test_complete_data_is_reused_unless_overwrite(slice_tmp_dir, tmp_path):
    data_dir = str(tmp_path / "data")
    datagen.generate(SliceProblem(), data_dir, slice_tmp_dir, progress=False)
    shard = os.path.join(data_dir, "translate_ende_slice-dev-00000-of-00001")
    before = os.stat(shard).st_mtime_ns
    time.sleep(0.01)
    assert datagen.generate(SliceProblem(), data_dir, slice_tmp_dir, progress=False)["reused"]
    assert os.stat(shard).st_mtime_ns == before
    assert "reused" not in datagen.generate(SliceProblem(), data_dir, slice_tmp_dir, overwrite=True, progress=False)
    assert os.stat(shard).st_mtime_ns != before


def test_an_exception_midway_leaves_nothing_that_looks_complete(slice_tmp_dir, tmp_path, monkeypatch):
    data_dir = str(tmp_path / "data")

    def failing_pairs(self, split, tmp_dir, stats):
        for number, pair in enumerate(ParallelTextProblem.text_pairs(self, split, tmp_dir, stats)):
            if split == "train" and number == 1500:
                raise KeyboardInterrupt
            yield pair

    monkeypatch.setattr(SliceProblem, "text_pairs", failing_pairs)
    with pytest.raises(KeyboardInterrupt):
        datagen.generate(SliceProblem(), data_dir, slice_tmp_dir, progress=False)
    assert not any("train" in name or "manifest" in name for name in _files(data_dir))
    with pytest.raises(UsageError, match="no complete data for translate_ende_slice"):
        SliceProblem().dataset("train", data_dir, 256, training=True)


def test_sigkill_midway_then_rerun_gives_the_uninterrupted_files(tmp_path):
    """SIGKILL while the train shards are being written; the rerun's files equal a clean run's."""
    command = [sys.executable, "-m", "t2t_keras.bin.datagen", "--problem=translate_ende_multi30k", "--noprogress"]
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    process = subprocess.Popen([*command, f"--data_dir={killed_dir}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def writing_train_shards():
        return os.path.isdir(killed_dir) and any("train" in n and n.startswith(".incomplete.") for n in os.listdir(killed_dir))

    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if writing_train_shards() and interrupt_while(process, writing_train_shards, signal.SIGKILL):
            break
        time.sleep(0.005)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "datagen finished before it could be killed"
    assert not os.path.exists(killed_dir / "translate_ende_multi30k.manifest.json")
    assert not any(n.startswith("translate_ende_multi30k-train") for n in os.listdir(killed_dir))

    subprocess.run([*command, f"--data_dir={killed_dir}"], check=True, capture_output=True)
    subprocess.run([*command, f"--data_dir={clean_dir}"], check=True, capture_output=True)
    names = _files(clean_dir)
    assert names == _files(killed_dir) and len(names) == 8
    match, mismatch, errors = filecmp.cmpfiles(killed_dir, clean_dir, names, shallow=False)
    assert mismatch == [] and errors == []


def test_empty_lines_and_invalid_utf8_are_counted_not_fatal(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    sources = ["A dog runs.", "", "A cat \xff sleeps.", "Two men talk.", "Rain falls."] * 40
    targets = ["Ein Hund rennt.", "Leer", "Eine Katze schläft.", "", "Es regnet."] * 40
    (raw / "train.en").write_bytes("\n".join(sources).encode("utf-8").replace("\xff".encode("utf-8"), b"\xff") + b"\n")
    (raw / "train.de").write_text("\n".join(targets) + "\n", encoding="utf-8")
    (raw / "dev.en").write_text("A dog.\n", encoding="utf-8")
    (raw / "dev.de").write_text("Ein Hund.\n", encoding="utf-8")

    class Tiny(SliceProblem):
        vocab_spec = VocabSpec(size=290)

    record = datagen.generate(Tiny(), str(tmp_path / "data"), str(raw), progress=False)
    train = record["splits"]["train"]
    assert train["pairs"] == 120
    assert train["dropped"] == {"empty source or target": 80}
    assert train["invalid_utf8_lines"] == 40
    assert train["invalid_utf8_examples"][:2] == ["train.en:3", "train.en:8"]
    assert "invalid UTF-8 lines replaced: 40 (train.en:3, train.en:8" in datagen.format_summary(record)


def test_files_of_different_lengths_are_an_error_naming_both(slice_tmp_dir, tmp_path):
    with open(os.path.join(slice_tmp_dir, "dev.de"), "a") as handle:
        handle.write("Eine Zeile zu viel.\n")
    with pytest.raises(UsageError, match=r"dev\.de has more lines than .*dev\.en \(line 101 has no partner\)"):
        datagen.generate(SliceProblem(), str(tmp_path / "data"), slice_tmp_dir, progress=False)


def test_missing_tmp_dir_and_unwritable_data_dir(slice_tmp_dir, tmp_path):
    with pytest.raises(UsageError, match="--tmp_dir is required for translate_ende_slice"):
        datagen.generate(SliceProblem(), str(tmp_path / "data"), None, progress=False)
    with pytest.raises(UsageError, match="nothing/raw/train.en: no such file"):
        datagen.generate(SliceProblem(), str(tmp_path / "data"), str(tmp_path / "nothing" / "raw"), progress=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="--data_dir=.*file/data is not writable"):
        datagen.generate(SliceProblem(), str(blocker / "data"), slice_tmp_dir, progress=False)


@pytest.fixture
def slice_data_dir(slice_tmp_dir, tmp_path):
    data_dir = str(tmp_path / "data")
    datagen.generate(SliceProblem(), data_dir, slice_tmp_dir, progress=False)
    return data_dir


def test_missing_or_empty_data_dir(tmp_path):
    problem = registry.problem("translate_ende_multi30k")
    with pytest.raises(UsageError, match=r"--data_dir=.*nowhere does not exist; run t2t-keras-datagen --problem=translate_ende_multi30k"):
        problem.dataset("train", str(tmp_path / "nowhere"), 256, training=True)
    with pytest.raises(UsageError, match=r"has no complete data for translate_ende_multi30k .*run t2t-keras-datagen"):
        problem.dataset("train", str(tmp_path), 256, training=True)


def test_truncated_shard_is_named(slice_data_dir):
    shard = os.path.join(slice_data_dir, "translate_ende_slice-train-00001-of-00002")
    with open(shard, "r+b") as handle:
        handle.truncate(os.path.getsize(shard) // 2)
    with pytest.raises(UsageError, match=r"translate_ende_slice-train-00001-of-00002 has \d+ bytes, the manifest says \d+"):
        SliceProblem().dataset("train", slice_data_dir, 256, training=True)


def test_corrupt_shard_is_named(slice_data_dir):
    shard = os.path.join(slice_data_dir, "translate_ende_slice-train-00000-of-00002")
    with open(shard, "r+b") as handle:
        handle.seek(5000)
        byte = handle.read(1)
        handle.seek(5000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(UsageError, match=r"translate_ende_slice-train-00000-of-00002: corrupt TFRecord shard"):
        count_and_check(manifest.shard_files(SliceProblem(), slice_data_dir, "train"))


def test_vocabulary_that_does_not_match_the_data(slice_data_dir):
    vocab = os.path.join(slice_data_dir, "translate_ende_slice.spm.model")
    with open(vocab, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(UsageError, match=r"translate_ende_slice.spm.model does not match the vocabulary the data was encoded with"):
        SliceProblem().load_vocabularies(slice_data_dir)


def test_manifest_records_the_vocabulary(slice_data_dir):
    with open(os.path.join(slice_data_dir, "translate_ende_slice.manifest.json")) as handle:
        record = json.load(handle)
    assert record["vocab"]["size"] == 1000
    assert record["vocab"]["sha256"] == SliceProblem().load_vocabularies(slice_data_dir).source.sha256


def test_cli_one_line_errors(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "t2t_keras.bin.datagen", "--noprogress", *args], capture_output=True, text=True)

    for args, message in (
        (["--problem=translate_ende_multi30", f"--data_dir={tmp_path}"], "error: unknown problem 'translate_ende_multi30'; did you mean 'translate_ende_multi30k'"),
        (["--problem=translate_ende_multi30k"], "error: --data_dir is required"),
        (["--problem=translate_ende_wmt14", f"--data_dir={tmp_path}"], "error: --tmp_dir is required for translate_ende_wmt14"),
    ):
        assert_one_line_error(cli(*args), message)


def test_files_in_other_encodings_are_refused_naming_the_iconv_that_converts_them(tmp_path):
    """UTF-16 and UTF-32 (a byte-order mark, or NUL bytes without one) are told from a file's
    first bytes, by the check datagen and the decoder run with their flags and by read_lines
    itself: one line naming the encoding and the command that converts the file, which works. A
    UTF-8 byte-order mark is no part of the first line."""
    lines = ["A dog runs.", "Zwei Frauen singen \u00fcber \u4e2d."]
    text = "".join(line + "\n" for line in lines)
    cases = {
        "le.en": (codecs.BOM_UTF16_LE + text.encode("utf-16-le"), "is UTF-16 (little-endian, with a byte-order mark), not UTF-8: "
                  "convert it with iconv -f UTF-16 -t UTF-8 {d}/le.en > {d}/le.utf8.en"),
        "be.en": (codecs.BOM_UTF16_BE + text.encode("utf-16-be"), "is UTF-16 (big-endian, with a byte-order mark), not UTF-8: "
                  "convert it with iconv -f UTF-16 -t UTF-8 {d}/be.en > {d}/be.utf8.en"),
        "le32.en": (codecs.BOM_UTF32_LE + text.encode("utf-32-le"), "is UTF-32 (little-endian, with a byte-order mark), not UTF-8: "
                    "convert it with iconv -f UTF-32 -t UTF-8 {d}/le32.en > {d}/le32.utf8.en"),
        "be32.en": (codecs.BOM_UTF32_BE + text.encode("utf-32-be"), "is UTF-32 (big-endian, with a byte-order mark), not UTF-8: "
                    "convert it with iconv -f UTF-32 -t UTF-8 {d}/be32.en > {d}/be32.utf8.en"),
        "gz16.en.gz": (gzip.compress(codecs.BOM_UTF16_LE + text.encode("utf-16-le")), "is UTF-16 (little-endian, with a byte-order "
                       "mark), not UTF-8: convert it with gunzip -c {d}/gz16.en.gz | iconv -f UTF-16 -t UTF-8 > {d}/gz16.utf8.en"),
    }
    for name, encoding, order in (("bare16le", "UTF-16LE", "little"), ("bare16be", "UTF-16BE", "big"),
                                  ("bare32le", "UTF-32LE", "little"), ("bare32be", "UTF-32BE", "big")):
        cases[name] = (text.encode(encoding), f"has NUL bytes, so it is not UTF-8 text; if it is {encoding[:6]} ({order}-endian, "
                       f"without a byte-order mark, as the NULs' places suggest), convert it with iconv -f {encoding} -t UTF-8 "
                       f"{{d}}/{name} > {{d}}/{name}.utf8")
    cases["packed.en"] = (gzip.compress(text.encode()), "is gzip-compressed but its name does not end in .gz: rename it, "
                          "e.g. mv {d}/packed.en {d}/packed.en.gz")
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        message = message.format(d=tmp_path)
        with pytest.raises(UsageError) as refused:
            check_text_file(str(path), "--train_source")
        assert str(refused.value) == f"--train_source={path} {message}"
        with pytest.raises(UsageError) as refused:
            list(read_lines(str(path), TextStats()))
        assert str(refused.value) == f"{path} {message}"
        if "iconv" in message and shutil.which("iconv"):
            subprocess.run(message.split("convert it with ")[1], shell=True, check=True)
            converted = message.rsplit("> ", 1)[1]
            assert list(read_lines(converted, TextStats(), strict=True)) == lines, name

    bom = tmp_path / "bom.en"
    bom.write_bytes(codecs.BOM_UTF8 + text.encode())
    check_text_file(str(bom), "--train_source")
    assert list(read_lines(str(bom), TextStats(), strict=True)) == lines and count_lines(str(bom)) == 2
    latin1 = tmp_path / "latin1.en"  # stray bytes that are not UTF-8 are read_lines' to replace (or, strict, to name)
    latin1.write_bytes("caf\u00e9\n".encode("latin-1"))
    check_text_file(str(latin1), "--train_source")
    with pytest.raises(UsageError, match=r"latin1.en:1: not UTF-8 \(byte 0xe9 at column 4\); .* iconv -f latin1 -t utf-8"):
        list(read_lines(str(latin1), TextStats(), strict=True))


def test_datagen_refuses_a_utf16_file_with_its_flags(tmp_path):
    """One line naming the encoding and the fix, before TensorFlow loads and before anything is written."""
    for name, line in (("train.en", "A dog."), ("train.de", "Ein Hund."), ("dev.en", "A cat."), ("dev.de", "Eine Katze.")):
        (tmp_path / name).write_text(line + "\n", encoding="utf-8")
    (tmp_path / "train.en").write_bytes(codecs.BOM_UTF16_BE + "A dog.\n".encode("utf-16-be"))
    (result,) = run_side_by_side([refusal_probe(
        "datagen", "--problem=translate_text", f"--data_dir={tmp_path / 'data'}", "--train_source=train.en", "--train_target=train.de",
        "--dev_source=dev.en", "--dev_target=dev.de", "--noprogress")], cwd=tmp_path)
    assert_one_line_error(result, f"error: --train_source={tmp_path / 'train.en'} is UTF-16 (big-endian, with a byte-order mark), "
                          f"not UTF-8: convert it with iconv -f UTF-16 -t UTF-8 {tmp_path / 'train.en'} > {tmp_path / 'train.utf8.en'}")
    assert result.stdout.split() == ["2", "False"] and not (tmp_path / "data").exists()


def test_data_of_other_splits_is_redone_only_when_asked(slice_tmp_dir, tmp_path):
    """Data a problem wrote before it gained a split (Multi30k's dev2) is refused in one line
    by the readers and by datagen, which regenerates it with --overwrite."""
    data_dir = str(tmp_path / "data")
    datagen.generate(SliceProblem(), data_dir, slice_tmp_dir, progress=False)

    class WithDev2(SliceProblem):
        num_shards = {"train": 2, "dev": 1, "dev2": 1}
        files = {**SliceProblem.files, "dev2": ("dev.en", "dev.de")}

    expected = (r"^.*translate_ende_slice\.manifest\.json lists the splits dev, train; translate_ende_slice now has "
                r"train, dev, dev2: rerun t2t-keras-datagen --problem=translate_ende_slice --data_dir=.* --overwrite\.$")
    for refused in (lambda: manifest.load(WithDev2(), data_dir), lambda: datagen.generate(WithDev2(), data_dir, slice_tmp_dir, progress=False)):
        with pytest.raises(UsageError, match=expected):
            refused()
    record = datagen.generate(WithDev2(), data_dir, slice_tmp_dir, overwrite=True, progress=False)
    assert record["splits"]["dev2"]["pairs"] == 100

"""The whole path on TensorFlow's ram:// filesystem, which has none of POSIX's semantics (any
prefix of a name is a "directory", no fsync): what works there works on gs:// through the same
tf.io.gfile calls. Text, data, run and export live in ram:// (what users keep in a bucket); the
averaged run and the decoded file on the local disk named by file:// URIs, which os calls do
not understand (one pipeline for both: each variant alone cost ~30 s of the suite)."""

import gzip
import os
import uuid

import pytest
import tensorflow as tf

from t2t_keras import files, registry
from t2t_keras.checkpoints import RunDir, average_checkpoints
from t2t_keras.data import datagen
from t2t_keras.decoding import file_decoding
from t2t_keras.decoding.trained_run import TrainedRun
from t2t_keras.translator import Translator
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.serving.exporter import export_run
from t2t_keras.training import trainer

pytestmark = pytest.mark.slow
TINY = "hidden_size=32,filter_size=64,num_heads=2,tokens_per_batch=1024,max_length=64,learning_rate_warmup_steps=20"


def _lines(name, count):
    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


def test_datagen_train_resume_average_decode_export(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where os.makedirs("file:///x") would have made ./file:/x
    root = f"ram://t2t_keras_test_{uuid.uuid4().hex}"
    local = f"file://{tmp_path}/root"
    files.makedirs(f"{root}/text")  # ram:// makes parents on write, a local disk does not
    for name, lines in (("train.en", _lines("train.en.gz", 1500)), ("train.de.gz", _lines("train.de.gz", 1500)),
                        ("dev.en", _lines("val.en.gz", 60)), ("dev.de", _lines("val.de.gz", 60))):
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        files.write_atomically(f"{root}/text/{name}", gzip.compress(data) if name.endswith(".gz") else data)

    problem = registry.problem("translate_text")
    problem.configure(problem.settings_from_flags({
        "train_source": f"{root}/text/train.en", "train_target": f"{root}/text/*.de.gz",
        "dev_source": f"{root}/text/dev.en", "dev_target": f"{root}/text/dev.de", "vocab_size": 600,
    }))
    record = datagen.generate(problem, f"{root}/data", None, progress=False, shuffle_buffer=500)
    assert record["splits"]["train"]["pairs"] == 1500 and not tf.io.gfile.glob(f"{root}/data/.incomplete*")

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    hparams = registry.hparams("transformer_tiny", TINY)

    def train(steps):
        settings = trainer.RunSettings(output_dir=f"{root}/run", data_dir=f"{root}/data", train_steps=steps,
                                       save_checkpoints_steps=2, log_steps=2, eval_sentences=0, keep_best="loss")
        return trainer.train(registry.problem("translate_text"), hparams, settings, strategy)

    train(2)
    assert train(4)["step"] == 4  # resumed from ckpt-2
    run = RunDir(f"{root}/run")
    assert [os.path.basename(p) for p in run.checkpoints()] == ["ckpt-2", "ckpt-4"]
    assert run.run_info()["best"]["step"] in (2, 4) and files.is_complete_dir(f"{root}/run/best")
    assert RunDir(f"{root}/run/best").hparams() == hparams

    average_checkpoints(f"{root}/run", 2, f"{local}/avg")  # the local disk from here, as file:// URIs
    translator = Translator.from_preset(f"{local}/avg", beam_size=2, extra_length=5)
    sentences = _lines("val.en.gz", 8)
    expected = translator.generate(sentences)
    source = f"{root}/text/decode.en"
    files.write_atomically(source, "".join(s + "\n" for s in sentences))
    from t2t_keras.data.text_files import TextStats, read_lines

    file_decoding.write_lines(f"{local}/decoded.de", [])  # an output file there, replaced below
    with files.atomic_path(f"{local}/decoded.de") as temporary, files.open_file(temporary, "w") as handle:
        file_decoding.decode_stream(translator.window_translator(), enumerate(read_lines(source, TextStats())),
                                    lambda lines: handle.write("".join(line + "\n" for line in lines)), window_size=5)
    assert files.read_text(f"{local}/decoded.de").splitlines() == expected

    path = export_run(TrainedRun.resolve(f"{local}/avg", translator.settings), f"{root}/export")  # to the bucket again
    assert path == f"{root}/export/4" and files.listdir(f"{root}/export") == ["4"]
    exported = Translator.from_preset(f"{root}/export")
    assert exported.generate(sentences) == expected
    assert exported.settings.max_input_tokens == 64
    assert not os.path.exists(tmp_path / "file:")

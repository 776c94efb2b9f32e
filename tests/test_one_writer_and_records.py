"""Nothing mixed, nothing misread: one trainer per run dir (one datagen per data dir, one decoder
per output), a vocabulary checked against the model's record, a damaged record named in one
line, and SIGTERM honoured by datagen as Ctrl-C is."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from t2t_keras import locks, registry
from t2t_keras.data.tokenizers import Vocabulary, train_sentencepiece
from t2t_keras.errors import UsageError
from t2t_keras.translator import Translator
from tests.testing import interrupt_while, run_side_by_side

def _lines(name: str, count: int) -> list[str]:
    import gzip

    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


HOLD = "import sys, time\nfrom t2t_keras import locks\nwith locks.holding(sys.argv[1], '--output_dir', 'x'):\n" \
       "    print('held', flush=True)\n    time.sleep(120)\n"


def test_a_held_lock_refuses_the_next_holder_and_a_killed_holder_blocks_nobody(tmp_path):
    lock = str(tmp_path / locks.LOCK_FILE)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, lock], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=rf"^--output_dir=x is in use by .* \(process {holder.pid} on "
                                             rf"{os.uname().nodename}, since .*\); wait for it to end or stop it"):
            with locks.holding(lock, "--output_dir", "x"):
                pass
    finally:
        holder.kill()  # kill -9: no clean-up of its own
        holder.wait()
    with locks.holding(lock, "--output_dir", "x"):
        assert os.path.exists(lock)
    assert not os.path.exists(lock)  # the holder removes it on release


def test_a_second_trainer_datagen_or_decoder_is_refused_while_the_first_holds(trained_output_dir, multi30k_data_dir,
                                                                              tmp_path):
    from t2t_keras.data import datagen
    from t2t_keras.training import trainer

    run_dir = tmp_path / "run"
    shutil.copytree(trained_output_dir, run_dir)
    settings = trainer.RunSettings(output_dir=str(run_dir), data_dir=multi30k_data_dir, train_steps=40, evaluate=False)
    with locks.holding(str(run_dir / locks.LOCK_FILE), "--output_dir", str(run_dir)):
        with pytest.raises(UsageError, match=rf"^--output_dir={run_dir} is in use by "):
            trainer.train(registry.problem("translate_ende_multi30k"), registry.hparams("transformer_tiny"), settings,
                          tf.distribute.OneDeviceStrategy("/cpu:0"))
    with locks.holding(os.path.join(multi30k_data_dir, locks.LOCK_FILE), "--data_dir", multi30k_data_dir):
        with pytest.raises(UsageError, match=rf"^--data_dir={multi30k_data_dir} is in use by "):
            datagen.generate(registry.problem("translate_ende_multi30k"), multi30k_data_dir, None, progress=False)
    (tmp_path / "in.en").write_text("A dog runs.\n", encoding="utf-8")
    output = tmp_path / "out.de"
    (run_dir / "run.json").write_text('{"problem": "translate_ende_multi30k", "vocab_sha', encoding="utf-8")  # cut short
    decode = [sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", f"--decode_from_file={tmp_path / 'in.en'}"]
    with locks.holding(str(output) + locks.FILE_LOCK_SUFFIX, "--decode_to_file", str(output)):
        refused, damaged = run_side_by_side([[*decode, f"--output_dir={trained_output_dir}", f"--decode_to_file={output}"],
                                             [*decode, f"--output_dir={run_dir}"]])
    for result, message in ((refused, f"error: --decode_to_file={output} is in use by "),
                            (damaged, f"error: {run_dir / 'run.json'} is damaged (Unterminated string starting at: line 1 "
                                      "column 40); its checkpoints are intact: restore it from a backup")):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), result.stderr[-600:]
    assert not output.exists()


def test_a_damaged_run_record_is_one_line_in_every_reader(trained_output_dir, multi30k_data_dir, tmp_path):
    from t2t_keras.decoding.trained_run import TrainedRun
    from t2t_keras.serving.exporter import export_run
    from t2t_keras.training import trainer

    run_dir = tmp_path / "run"
    shutil.copytree(trained_output_dir, run_dir)
    (run_dir / "run.json").write_bytes(b"\x00" * 40)  # a copy cut off by a full disk, or garbage
    message = rf"^{run_dir / 'run.json'} is damaged \(.*\); its checkpoints are intact: restore it from a backup"
    with pytest.raises(UsageError, match=message):
        Translator.from_preset(str(run_dir))
    with pytest.raises(UsageError, match=message):
        export_run(TrainedRun.resolve(str(run_dir)), str(tmp_path / "export"))
    settings = trainer.RunSettings(output_dir=str(run_dir), data_dir=multi30k_data_dir, train_steps=40, evaluate=False)
    with pytest.raises(UsageError, match=message):
        trainer.train(registry.problem("translate_ende_multi30k"), registry.hparams("transformer_tiny"), settings,
                      tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert not (tmp_path / "export").exists()


def test_a_foreign_vocabulary_of_the_same_size_is_named_and_one_of_the_same_pieces_decodes(trained_output_dir, tmp_path):
    from sentencepiece import sentencepiece_model_pb2

    run_dir = tmp_path / "run"
    shutil.copytree(trained_output_dir, run_dir)
    own = Vocabulary.load(str(run_dir / "vocab.spm.model"))
    expected = Translator.from_preset(str(run_dir), beam_size=2).generate(["A dog runs in the snow."])

    resaved = sentencepiece_model_pb2.ModelProto.FromString(own.model_proto)
    resaved.trainer_spec.model_prefix = "elsewhere"  # other bytes, the same pieces
    (run_dir / "vocab.spm.model").write_bytes(resaved.SerializeToString())
    assert Translator.from_preset(str(run_dir), beam_size=2).generate(["A dog runs in the snow."]) == expected

    foreign = Vocabulary(train_sentencepiece(_lines("val.fr.gz", 1014), own.size))  # French: the same size, other pieces
    assert foreign.size == own.size and foreign.pieces_sha256 != own.pieces_sha256
    (run_dir / "vocab.spm.model").write_bytes(foreign.model_proto)
    with pytest.raises(UsageError, match=rf"^{run_dir / 'vocab.spm.model'} is not the vocabulary recorded in "
                                         rf"{run_dir / 'run.json'}: the same size \({own.size}\) but other pieces"):
        Translator.from_preset(str(run_dir))
    record = json.loads((run_dir / "run.json").read_text())
    assert record["vocab_pieces_sha256"] == own.pieces_sha256


def test_sigterm_stops_datagen_at_once_leaving_nothing_half_written_and_the_rerun_completes(tmp_path):
    data_dir = tmp_path / "data"
    command = [sys.executable, "-m", "t2t_keras.bin.datagen", "--problem=translate_ende_multi30k", "--noprogress",
               f"--data_dir={data_dir}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def writing_train_shards():
        return data_dir.is_dir() and any("train" in n and n.startswith(".incomplete.") for n in os.listdir(data_dir))

    deadline, sent = time.time() + 120, None
    while time.time() < deadline and process.poll() is None:
        if writing_train_shards() and interrupt_while(process, writing_train_shards, signal.SIGTERM):
            sent = time.monotonic()
            break
        time.sleep(0.005)
    stderr = process.communicate()[1]
    assert sent is not None, "datagen finished before the signal"
    assert process.returncode == 143 and time.monotonic() - sent < 2.0, (process.returncode, stderr[-500:])
    assert stderr.strip().splitlines()[-1].startswith("SIGTERM: finished files are kept and nothing half-written is left")
    assert not [n for n in os.listdir(data_dir) if n.startswith(".incomplete.") or n == locks.LOCK_FILE]
    assert subprocess.run(command, capture_output=True).returncode == 0
    assert (data_dir / "translate_ende_multi30k.manifest.json").is_file()

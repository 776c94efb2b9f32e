"""A write the filesystem refuses (no space, over quota, file too large, read-only): one `error:`
line naming the path and what to do, status 2, nothing half-written left, and the same command,
rerun once there is room, ends as an uninterrupted run.

The full disk of the command tests is the kernel's own refusal in a child process: once the
command is under way, it is paused, its files may grow no further (RLIMIT_FSIZE, as `ulimit -f`:
every write past it fails with EFBIG, Python ignoring SIGXFSZ) and it goes on. That needs no
privilege, so it runs in CI; ENOSPC itself is /dev/full's."""

import errno
import filecmp
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import files, registry
from t2t_keras.checkpoints import RunDir
from t2t_keras.data import datagen
from t2t_keras.decoding.file_decoding import window_lines
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams, apply_overrides
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from tests.testing import SAME_KERNELS_FLAG, assert_one_line_error

pytestmark = pytest.mark.slow

FULL = 64 << 10  # bytes a file may reach once the disk is "full": under every checkpoint, shard and export


def _command(module, *args):
    return [sys.executable, "-m", f"t2t_keras.bin.{module}", *args]


def _fill_up_when(process, moment, limit=lambda: FULL, timeout=300) -> None:
    """When `moment()` is true of `process` (checked again while it is paused, so that it cannot
    run past it), its files may grow to `limit()` bytes and no further; then it goes on."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if moment():
            process.send_signal(signal.SIGSTOP)
            try:
                while process.poll() is None and _state(process.pid) not in ("T", "Z"):
                    time.sleep(0.001)
                if process.poll() is None and moment():
                    size = limit()
                    resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (size, size))
                    return
            finally:
                if process.poll() is None:
                    process.send_signal(signal.SIGCONT)
        time.sleep(0.002)
    pytest.fail("the command ended before its disk could fill up")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _finish(process):
    stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _debris(directory) -> list[str]:
    """Temporary names of the package (.incomplete.*) and of TensorFlow (ckpt-N_temp/, *.tempstate*, checkpoint.tmp*)."""
    return [os.path.relpath(os.path.join(d, name), directory) for d, dirs, names in os.walk(directory) for name in dirs + names
            if name.startswith((files.TEMP_PREFIX, files.PREVIOUS_PREFIX)) or "_temp" in name or ".temp" in name or ".tmp" in name]


def assert_refused(result, path_start: str, flag: str, progress: bool = False) -> None:
    """Status 2 and one line: the refused write, under `path_start`, and `flag` to choose another;
    after the command's `progress` lines (the trainer's), if any, and no traceback."""
    if progress:
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and not any("Traceback" in line for line in lines), result.stderr
        result = subprocess.CompletedProcess(result.args, result.returncode, result.stdout, lines[-1])
    assert_one_line_error(result, f"error: file too large writing {path_start}")
    assert f": raise the file size limit (ulimit -f) or choose another {flag}, then rerun the same command; " in result.stderr


# --- what the commands are told ---

def test_refused_writes_are_recognised_with_their_path_and_nothing_else_is(tmp_path):
    """Python's ENOSPC names no file on write(); `writing` adds it. TensorFlow's wrapping of
    ENOSPC names it in its message, with the suffix of its temporary files dropped; its
    out-of-memory error of the same class is not a refused write."""
    with pytest.raises(OSError) as raised, files.writing("/dev/full"), open("/dev/full", "wb", buffering=0) as handle:
        handle.write(b"x")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, "/dev/full")
    assert files.refused_write(raised.value) is raised.value

    with pytest.raises(tf.errors.ResourceExhaustedError) as raised:
        with tf.io.gfile.GFile("/dev/full", "w") as handle:
            handle.write("x")
    refused = files.refused_write(raised.value)
    assert (refused.errno, refused.filename) == (errno.ENOSPC, "/dev/full")

    saved = "/runs/a b/ckpt-20_temp/part-00000-of-00001.data-00000-of-00001"  # in SaveV2's message as TensorFlow 2.21 words it
    read_only = tf.errors.PermissionDeniedError(None, None, "{{function_node __wrapped__SaveV2_dtypes_3_device_/job:localhost/"
                                                f"replica:0/task:0/device:CPU:0}}}} {saved}.tempstate123; Read-only file system [Op:SaveV2]")
    assert (files.refused_write(read_only).errno, files.refused_write(read_only).filename) == (errno.EROFS, saved)
    out_of_memory = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[64,32000]")
    assert files.refused_write(out_of_memory) is None
    assert files.refused_write(FileNotFoundError(errno.ENOENT, "No such file or directory", "x")) is None

    with pytest.raises(UsageError) as raised:
        with files.refused_writes_as_usage_errors({str(tmp_path): "--output_dir", str(tmp_path / "export"): "--export_dir"}):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "export" / "7" / "saved_model.pb"))
    assert str(raised.value) == (
        f"no space left on device writing {tmp_path / 'export' / '7' / 'saved_model.pb'}: free space on that filesystem "
        "or choose another --export_dir, then rerun the same command; nothing half-written is left.")


def test_atomic_writes_name_the_final_path_and_leave_nothing(tmp_path):
    """A write refused inside `atomic_path` is named by the path it was for, not the temporary
    one it removed: Python's (no file named) and TensorFlow's (inside a directory)."""
    path = str(tmp_path / "export" / "7")
    with pytest.raises(OSError) as raised, files.atomic_path(str(tmp_path / "run.json")) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(b"{")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert raised.value.filename == str(tmp_path / "run.json")
    os.makedirs(tmp_path / "export")
    with pytest.raises(OSError) as raised, files.atomic_path(path) as temporary:
        os.makedirs(os.path.join(temporary, "variables"))
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{temporary}/variables/variables.data-00000-of-00001.tempstate9; No space left on device")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, f"{path}/variables/variables.data-00000-of-00001")
    assert os.listdir(tmp_path) == ["export"] and os.listdir(tmp_path / "export") == []


# --- the commands ---

def test_datagen_on_a_full_disk_leaves_nothing_and_a_rerun_makes_the_same_data(multi30k_data_dir, tmp_path):
    """The disk fills up while the train shards are written: one line naming a shard, the data_dir
    as it was (none), and the rerun writes the bytes of an uninterrupted run; a later start removes
    what a killed run left even beside complete data."""
    data_dir = tmp_path / "data"
    command = _command("datagen", "--problem=translate_ende_multi30k", "--noprogress", f"--data_dir={data_dir}")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _fill_up_when(process, lambda: data_dir.is_dir() and any(
        name.startswith(".incomplete.translate_ende_multi30k-train") for name in os.listdir(data_dir)))
    assert_refused(_finish(process), f"{data_dir}/translate_ende_multi30k-train-", "--data_dir")
    assert not data_dir.exists()  # made by the command, emptied of what it wrote

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    names = sorted(os.listdir(multi30k_data_dir))
    assert sorted(os.listdir(data_dir)) == names
    assert filecmp.cmpfiles(data_dir, multi30k_data_dir, names, shallow=False)[1:] == ([], [])
    (data_dir / ".incomplete.translate_ende_multi30k-train-00000-of-00004").write_bytes(b"half")  # a killed --overwrite's
    assert datagen.generate(registry.problem("translate_ende_multi30k"), str(data_dir), None, progress=False)["reused"]
    assert _debris(data_dir) == []


def test_trainer_on_a_full_disk_keeps_the_last_checkpoint_and_a_rerun_ends_as_an_uninterrupted_run(multi30k_data_dir, tmp_path):
    """The disk fills up after ckpt-5: saving ckpt-10 fails in one line, its parts' folder is
    removed, and the rerun resumes from ckpt-5 (removing a killed save's leftovers first) to the
    weights, Adam's slots and step of the same run never stopped."""
    seeded = ["--problem=translate_ende_multi30k", "--hparams_set=transformer_tiny", f"--data_dir={multi30k_data_dir}",
              "--hparams=hidden_size=32,filter_size=64,num_heads=2,tokens_per_batch=512,max_length=64,learning_rate_warmup_steps=20,"
              "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0",
              "--seed=7", SAME_KERNELS_FLAG, "--train_steps=10", "--save_checkpoints_steps=5",
              "--log_steps=5", "--noevaluate"]
    output_dir, alone = tmp_path / "run", tmp_path / "alone"
    command = _command("trainer", f"--output_dir={output_dir}", *seeded)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    uninterrupted = subprocess.Popen(_command("trainer", f"--output_dir={alone}", *seeded), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def between_saves():
        state = output_dir / "checkpoint"
        return (state.exists() and 'ckpt-5"' in state.read_text() and not (output_dir / "ckpt-10_temp").exists()
                and not (output_dir / "ckpt-10.index").exists())

    _fill_up_when(process, between_saves)
    assert_refused(_finish(process), f"{output_dir}/ckpt-10_temp/part-00000-of-00001.data-00000-of-00001:", "--output_dir",
                   progress=True)
    assert _debris(output_dir) == []
    assert [os.path.basename(path) for path in RunDir(output_dir).checkpoints()] == ["ckpt-5"]

    (output_dir / "ckpt-10_temp").mkdir()  # as a kill during the save would leave them
    (output_dir / "ckpt-10_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_bytes(b"\0" * 100)
    (output_dir / f"checkpoint.tmp{'0' * 32}").write_text("half")
    resumed = subprocess.run(command, capture_output=True, text=True)
    uninterrupted = _finish(uninterrupted)
    assert resumed.returncode == 0 and uninterrupted.returncode == 0, resumed.stderr + uninterrupted.stderr
    assert f"Resuming from {output_dir}/ckpt-5 (step 5)" in resumed.stderr and "trained to step 10" in resumed.stdout
    before_training = resumed.stderr.split("Resuming from")[0]
    assert f"Removed what checkpoint saves cut short left in {output_dir}: checkpoint.tmp{'0' * 32}, ckpt-10_temp.\n" in before_training
    assert _debris(output_dir) == []
    resumed_state, alone_state = _training_state(output_dir / "ckpt-10"), _training_state(alone / "ckpt-10")
    assert resumed_state.keys() == alone_state.keys() and len(alone_state) > 100
    for name in alone_state:
        np.testing.assert_allclose(resumed_state[name], alone_state[name], rtol=0, atol=1e-6, err_msg=name)


def _training_state(checkpoint) -> dict:
    reader = tf.train.load_checkpoint(str(checkpoint))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map() if name.startswith(("model/", "optimizer/"))}


DECODE_HPARAMS = "beam_size=1,extra_length=3,sentences_per_batch=2"
WINDOW = window_lines(apply_overrides(DecodeHParams(), DECODE_HPARAMS, "--decode_hparams"))  # lines written at a time


def test_decoder_on_a_full_disk_keeps_complete_lines_and_a_rerun_ends_as_one_decode(trained_output_dir, tmp_path):
    """The disk fills up after the first window: the next write is cut back to the last complete
    line, the error names the output, and the rerun continues into the file one decode writes."""
    source = tmp_path / "in.en"
    with gzip.open(os.path.join(MULTI30K_DIR, "val.en.gz"), "rt", encoding="utf-8") as handle:
        source.write_text("".join(next(handle) for _ in range(3 * WINDOW)), encoding="utf-8")
    output, reference = tmp_path / "out.de", tmp_path / "one_decode.de"
    run = ["--noprogress", f"--output_dir={trained_output_dir}", f"--decode_from_file={source}",
           f"--decode_hparams={DECODE_HPARAMS}"]
    command = _command("decoder", *run, f"--decode_to_file={output}")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    one_decode = subprocess.Popen(_command("decoder", *run, f"--decode_to_file={reference}"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)

    def windows_written():
        return output.exists() and 0 < output.read_bytes().count(b"\n") < 3 * WINDOW

    _fill_up_when(process, windows_written, limit=lambda: output.stat().st_size + 8)  # the next window gets 8 bytes in
    assert_refused(_finish(process), str(output), "--decode_to_file")
    assert _finish(one_decode).returncode == 0
    expected = reference.read_bytes()
    written = output.read_bytes()
    done = written.count(b"\n")  # whole windows: the 8 bytes (fewer than a window's lines) were cut off again
    assert written.endswith(b"\n") and done % WINDOW == 0 and 0 < done < 3 * WINDOW and expected.startswith(written)
    assert json.loads((tmp_path / "out.de.decode.json").read_text())["complete"] is False
    assert _debris(tmp_path) == []

    resumed = subprocess.run(command, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {output}: {done} of {3 * WINDOW} input lines are done" in resumed.stderr
    assert output.read_bytes() == expected


def test_exporter_on_a_full_disk_leaves_no_version_and_a_rerun_exports(trained_output_dir, tmp_path):
    """The disk fills up while the SavedModel is written: one line naming its file under
    export_dir/30, neither 30/ nor .incomplete.30/ left (a server sees nothing), and the rerun exports."""
    export_dir = tmp_path / "export"
    command = _command("exporter", f"--output_dir={trained_output_dir}", f"--export_dir={export_dir}")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _fill_up_when(process, lambda: (export_dir / ".incomplete.30").exists())
    assert_refused(_finish(process), f"{export_dir}/30/", "--export_dir")
    assert not export_dir.exists()

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0 and rerun.stdout.strip() == f"exported {export_dir / '30'}", rerun.stderr
    assert os.listdir(export_dir) == ["30"] and (export_dir / "30" / "saved_model.pb").exists()

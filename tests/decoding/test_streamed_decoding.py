"""t2t-keras-decoder on a long file: written as it goes in input order, killed and resumed into
the file an uninterrupted run writes, sharded into blocks whose concatenation is that file."""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from t2t_keras.decoding.file_decoding import window_lines
from t2t_keras.hparams_lib import DecodeHParams, apply_overrides
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from tests.testing import assert_one_line_error, interrupt_while, popen_interruptible, run_side_by_side

pytestmark = pytest.mark.slow

DECODE_HPARAMS = "beam_size=1,extra_length=3,sentences_per_batch=8"
FAST = f"--decode_hparams={DECODE_HPARAMS}"
WINDOW = window_lines(apply_overrides(DecodeHParams(), DECODE_HPARAMS, "--decode_hparams"))  # lines written at a time
LINES = 5 * WINDOW - 20


def _decoder(*args):
    return [sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", FAST, *args]


@pytest.fixture(scope="module")
def long_input(tmp_path_factory):
    """LINES lines: Multi30k train sentences, with empty lines among them."""
    path = tmp_path_factory.mktemp("long") / "in.en"
    with gzip.open(os.path.join(MULTI30K_DIR, "train.en.gz"), "rt", encoding="utf-8") as handle:
        lines = [next(handle).rstrip("\n") for _ in range(LINES - 3)]
    for position in (0, 2 * WINDOW + 10, LINES - 1):
        lines.insert(position, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_killed_and_resumed_equals_two_shards_concatenated(trained_output_dir, long_input, tmp_path):
    """Two shards (side by side) make the reference; an unsharded run is read while it writes,
    killed halfway, and resumed: it decodes only the lines left and ends byte-equal to them."""
    run = [f"--output_dir={trained_output_dir}", f"--decode_from_file={long_input}"]
    shard_runs = run_side_by_side([_decoder(*run, f"--decode_to_file={tmp_path / 'sharded'}", "--decode_shards=2",
                                            f"--decode_shard_id={i}") for i in (0, 1)])
    for result in shard_runs:
        assert result.returncode == 0, result.stderr
    shards = [(tmp_path / f"sharded.shard-{i}-of-2").read_bytes() for i in (0, 1)]
    assert [shard.count(b"\n") for shard in shards] == [LINES // 2, LINES // 2]
    reference = shards[0] + shards[1]

    output = tmp_path / "out.de"
    process = subprocess.Popen(_decoder(*run, f"--decode_to_file={output}"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        content = output.read_bytes() if output.exists() else b""
        if content:
            assert content.endswith(b"\n"), "a partial line was visible"
            assert reference.startswith(content), "the output is not a prefix of the finished file"
            assert content.count(b"\n") % WINDOW == 0, "the output grew by less than a window"
        if content.count(b"\n") >= 2 * WINDOW and interrupt_while(
                process, lambda: output.read_bytes().count(b"\n") < LINES, signal.SIGKILL):
            break
        time.sleep(0.05)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "decoding ended before it could be killed"
    # Killed mid-file with whole windows written: the file grows window by window while decoding.
    # (Not a count of snapshots: a fast decoder may write two windows between two polls.)
    kept = output.read_bytes().count(b"\n")
    assert 2 * WINDOW <= kept < LINES and kept % WINDOW == 0

    resumed = subprocess.run(_decoder(*run, f"--decode_to_file={output}"), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {output}: {kept} of {LINES} input lines are done; decoding the {LINES - kept} left." in resumed.stderr
    assert f"decoded {LINES - kept} lines" in resumed.stderr
    assert output.read_bytes() == reference
    record = json.loads((tmp_path / "out.de.decode.json").read_text())
    assert record["complete"] is True and {"step_product", "beam_candidates", "top_k"} <= set(record["kernel_choices"])

    # The record refuses a resume from another input or another checkpoint, in one line each,
    # before any model is built: the other run's weights cannot even be read.
    changed_input = tmp_path / "changed.en"
    shutil.copyfile(long_input, changed_input)
    other_run = tmp_path / "other_run"
    shutil.copytree(trained_output_dir, other_run)
    for weights in other_run.glob("ckpt-*.data-*"):
        weights.write_bytes(b"")
    output.write_bytes(reference[: reference.index(b"\n", 100) + 1])  # as if killed early
    with open(changed_input, "a", encoding="utf-8") as handle:
        handle.write("One more line.\n")
    refusals = run_side_by_side([
        _decoder(f"--output_dir={trained_output_dir}", f"--decode_from_file={changed_input}", f"--decode_to_file={output}"),
        _decoder(f"--output_dir={other_run}", f"--decode_from_file={long_input}", f"--decode_to_file={output}"),
        _decoder(*run, f"--decode_to_file={output}"),  # unchanged: nothing else to do but finish
    ])
    assert_one_line_error(refusals[0], f"error: {output} was decoded with another input file, another input content")
    assert_one_line_error(refusals[1], f"error: {output} was decoded with another checkpoint")
    assert "--start_over" in refusals[1].stderr
    assert refusals[2].returncode == 0, refusals[2].stderr
    assert output.read_bytes() == reference
    finished = subprocess.run(_decoder(*run, f"--decode_to_file={output}"), capture_output=True, text=True)
    assert finished.returncode == 0 and finished.stderr.strip().splitlines()[-1] == (
        f"{output} is complete ({LINES} input lines); nothing to do (--start_over decodes it again)."), finished.stderr
    assert output.read_bytes() == reference


def test_ctrl_c_keeps_the_lines_written_and_says_so_on_its_own_line(trained_output_dir, long_input, tmp_path):
    output = tmp_path / "out.de"
    process = popen_interruptible(
        [sys.executable, "-m", "t2t_keras.bin.decoder", FAST, f"--output_dir={trained_output_dir}",
         f"--decode_from_file={long_input}", f"--decode_to_file={output}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if output.exists() and output.read_bytes().count(b"\n") >= WINDOW:
            assert interrupt_while(process, lambda: output.read_bytes().count(b"\n") < LINES), "decoded every line first"
            break
        time.sleep(0.05)
    stderr = process.communicate()[1]
    assert process.returncode == 130, stderr
    kept = output.read_bytes().count(b"\n")
    last = stderr.rstrip("\n").split("\n")[-1]  # its own line: the progress bar ended before it
    assert last == f"interrupted: {kept} of {LINES} input lines are in {output}; rerun the same command to continue.", stderr
    assert WINDOW <= kept < LINES

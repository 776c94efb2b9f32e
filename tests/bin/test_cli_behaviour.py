"""What every command does around its work: quiet output, one-line failures, Ctrl-C, --help."""

import os
import subprocess
import sys
import time

from tests.testing import (assert_one_line_error, interrupt_while, popen_interruptible, refusal_probe, run_side_by_side,
                           write_corpus_slice)


def _cli(module, *args, **kwargs):
    return subprocess.run([sys.executable, "-m", f"t2t_keras.bin.{module}", *args], capture_output=True, text=True, **kwargs)


def test_a_successful_command_prints_no_tensorflow_start_up_lines(tmp_path):
    result = _cli("hparams", "--hparams_set=transformer_base")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    # A command that loads TensorFlow (and tensorflow_text): only its own summary, on stdout;
    # its data_dir given as a file:// URI, which must not become a directory named "file:".
    text = write_corpus_slice(tmp_path / "text", train_lines=300, dev_lines=20)
    result = _cli("datagen", "--problem=translate_text", f"--data_dir=file://{tmp_path / 'data'}", "--train_source=train.en",
                  "--train_target=train.de", "--dev_source=dev.en", "--dev_target=dev.de", "--vocab_size=500",
                  "--noprogress", cwd=text)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith("translate_text: wrote vocabulary translate_text.spm.model (500 pieces)")
    assert os.path.isfile(tmp_path / "data" / "translate_text.manifest.json")
    assert not os.path.exists(os.path.join(text, "file:"))


def test_usr_dir_that_does_not_import_is_one_line_at_its_file_and_line(tmp_path):
    (tmp_path / "syntax").mkdir()
    (tmp_path / "syntax" / "mine.py").write_text("import os\n\ndef broken(:\n    pass\n")
    assert_one_line_error(_cli("hparams", f"--t2t_usr_dir={tmp_path / 'syntax'}", "--registry_help"),
                          f"error: {tmp_path / 'syntax' / 'mine.py'}:3: invalid syntax")
    (tmp_path / "missing").mkdir()
    (tmp_path / "missing" / "__init__.py").write_text("from . import problems\n")
    (tmp_path / "missing" / "problems.py").write_text("import os\nimport no_such_module_here\n")
    assert_one_line_error(_cli("datagen", f"--t2t_usr_dir={tmp_path / 'missing'}", "--problem=x", f"--data_dir={tmp_path / 'd'}"),
                          f"error: {tmp_path / 'missing' / 'problems.py'}:2: ModuleNotFoundError: No module named 'no_such_module_here'")


def test_a_failed_start_leaves_no_new_directories(tmp_path):
    output_dir = tmp_path / "new" / "run"
    assert_one_line_error(
        _cli("trainer", "--problem=translate_ende_multi30k", "--hparams_set=transformer_tiny",
             f"--data_dir={tmp_path / 'no_data'}", f"--output_dir={output_dir}"),
        f"error: --data_dir={tmp_path / 'no_data'} does not exist",
    )
    assert os.listdir(tmp_path) == []


def test_an_output_directory_that_cannot_be_made_is_refused_with_the_flags(tmp_path):
    """The exporter's --export_dir (either format) and t2t-keras-avg-checkpoints' --avg_dir are
    checked before TensorFlow loads (and before the run dir is read), in one line naming the
    path as given; nothing is made. (The decoder's --decode_to_file: tests/decoding.)"""
    (tmp_path / "a_file").write_text("")
    run = "--output_dir=no_run_needed"
    cases = [
        ("exporter", [run, "--export_dir=a_file"], "error: --export_dir=a_file is a file; name a directory."),
        ("exporter", [run, "--format=ctranslate2", "--export_dir=a_file/ct2/ende"],
         f"error: --export_dir=a_file/ct2/ende: {tmp_path / 'a_file'} is a file, not a directory; choose another path."),
        ("avg_checkpoints", [run, "--avg_dir=a_file/avg"],
         f"error: --avg_dir=a_file/avg: {tmp_path / 'a_file'} is a file, not a directory; choose another path."),
    ]
    results = run_side_by_side([refusal_probe(module, *args) for module, args, _ in cases], cwd=tmp_path)
    for (module, _, message), result in zip(cases, results):
        assert_one_line_error(result, message)
        assert result.stdout.split() == ["2", "False"], (module, result.stdout, result.stderr)
    assert os.listdir(tmp_path) == ["a_file"]


def test_ctrl_c_is_one_line_status_130_and_leaves_nothing_half_written(tmp_path):
    """Ctrl-C while datagen writes the shards, after the vocabulary: tried again in a new
    directory if the command finished before it could be paused there (seconds of shard writing
    against a test process that may be starved of the CPU)."""
    for attempt in range(3):
        data_dir = tmp_path / str(attempt)
        command = [sys.executable, "-m", "t2t_keras.bin.datagen", "--problem=translate_ende_multi30k",
                   f"--data_dir={data_dir}", "--noprogress"]
        process = popen_interruptible(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        vocabulary, manifest = data_dir / "translate_ende_multi30k.spm.model", data_dir / "translate_ende_multi30k.manifest.json"
        deadline = time.time() + 600
        while not vocabulary.exists() and process.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert vocabulary.exists(), "datagen ended or stalled before the vocabulary was written"
        interrupted = interrupt_while(process, lambda: not manifest.exists())
        _, stderr = process.communicate(timeout=120)
        if interrupted:
            break
        assert process.returncode == 0, stderr
    assert interrupted, "datagen finished each time before it could be interrupted"
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines() == [
        "interrupted: finished files are kept and nothing half-written is left; rerun to continue."
    ]
    assert not [name for name in os.listdir(data_dir) if ".incomplete" in name]
    assert not manifest.exists()
    assert vocabulary.exists()  # a finished file is kept


def test_help_lists_the_commands_own_flags():
    result = _cli("decoder", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("t2t-keras-decoder: translate a file")
    for line in ("  --decode_from_file: Source sentences, one per line (plain or .gz).",
                 "  --n_best: Hypotheses written per input line, best first (at most beam_size). (default: 1)",
                 "  --output_dir: "):
        assert line in result.stdout, result.stdout
    assert "--tpu" not in result.stdout and "--xml_output_file" not in result.stdout  # not absl's or TensorFlow's


def test_flags_absl_refuses_are_one_line_status_2():
    """An unknown flag or a value of the wrong type, refused by absl's parser before the command
    runs: one line and status 2 like any wrong input (absl's own is "FATAL Flags parsing error",
    a second line and status 1)."""
    cases = [
        ("decoder", "--nosuchflag=1", "error: Unknown command line flag 'nosuchflag' (--help lists this command's flags)"),
        ("decoder", "--n_best=abc", "error: flag --n_best=abc: invalid literal for int() with base 10: 'abc' (--help"),
        ("trainer", "--train_stepz=10", "error: Unknown command line flag 'train_stepz'. Did you mean: train_steps ?"),
        ("trainer", "--train_steps=ten", "error: flag --train_steps=ten: invalid literal for int()"),
    ]
    results = run_side_by_side([[sys.executable, "-m", f"t2t_keras.bin.{module}", argument] for module, argument, _ in cases])
    for (_, _, message), result in zip(cases, results):
        assert_one_line_error(result, message)


def test_a_filesystem_error_is_one_line_naming_the_path(tmp_path):
    """What the commands' own checks do not foresee, the filesystem's refusal (local, or
    tf.io.gfile's for a URL), still ends as one line naming the path, not a traceback."""
    (tmp_path / "a_file").write_text("")
    program = ("import sys\nfrom t2t_keras.bin import flags\n"
               "def main(argv):\n{}\n"
               "flags.run(main, lambda: None)\n")
    local = program.format(f"    open({str(tmp_path / 'a_file' / 'out.txt')!r}, 'w')")
    result = subprocess.run([sys.executable, "-c", local], capture_output=True, text=True)
    assert_one_line_error(result, f"error: {tmp_path / 'a_file' / 'out.txt'}: Not a directory")
    remote = program.format("    import tensorflow as tf\n    tf.io.gfile.listdir('ram://t2t_keras_nothing/')")
    result = subprocess.run([sys.executable, "-c", remote], capture_output=True, text=True)
    assert_one_line_error(result, "error: Could not find directory ram://t2t_keras_nothing/")


def test_the_python_api_prints_no_tensorflow_cpu_feature_line():
    """Importing the package and running TensorFlow from Python does not show TensorFlow's
    CPU-feature note (an INFO line of its logging; the suite's own quieting removed). The CUDA
    probe's lines come before TensorFlow reads any setting, in every program that imports it."""
    env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    program = "import t2t_keras.decoding.search_module\nimport tensorflow as tf\nprint(int(tf.constant(1) + 1))"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert result.returncode == 0 and result.stdout == "2\n", result.stderr
    assert "cpu_feature_guard" not in result.stderr, result.stderr


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    """`t2t-keras-bleu ... | head -1`: the reader closes the pipe (here before the first line);
    the command ends as Unix tools do (status 141, nothing on stderr), not with an error or a
    traceback."""
    hypotheses, references = tmp_path / "hyp.de", tmp_path / "ref.de"
    hypotheses.write_text("Ein Hund rennt .\n")
    references.write_text("Ein Hund läuft .\n")
    command = f"{sys.executable} -m t2t_keras.bin.bleu --translation={hypotheses} --reference={references} | true; echo ${{PIPESTATUS[0]}}"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert result.stdout.strip() == "141" and result.stderr == "", result.stderr


def test_the_commands_keep_onednn_kernels_for_every_shape_unless_told_otherwise():
    """Every command sets oneDNN's kernel cache before TensorFlow runs (decoding meets thousands
    of product shapes: docs/results/decoding_speed.md, "oneDNN's kernel cache"); a value the user
    set stays."""
    probe = "import os, t2t_keras.bin; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    env = {name: value for name, value in os.environ.items() if name != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.split() == ["16384"]
    env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "1024"
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.split() == ["1024"]

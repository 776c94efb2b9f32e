"""The training loop end to end on translate_ende_multi30k with a very small model."""

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from absl import logging as absl_logging
import tensorflow as tf

from t2t_keras import registry, system
from t2t_keras.errors import UsageError
from t2t_keras.checkpoints import RunDir, average_checkpoints, restore_model
from t2t_keras.data.tokenizers import Vocabulary, train_sentencepiece
from t2t_keras.kernels import native
from t2t_keras.decoding.shortlist import Shortlist
from t2t_keras.models import Transformer
from t2t_keras.training import kernel_choices, trainer
from t2t_keras.training.dropout_schedule import ResidualDropoutSchedule
from t2t_keras.training.evaluator import Evaluator
from t2t_keras.training.train_step import TrainStep
from tests.testing import (SAME_KERNELS, SAME_KERNELS_FLAG, assert_one_line_error, interrupt_while, popen_interruptible,
                           trained_with_another_vocabulary,
                           run_side_by_side, seed_generators)

SMALL = "hidden_size=32,filter_size=64,num_heads=2,tokens_per_batch=512,max_length=64,learning_rate_warmup_steps=20"


def _hparams(overrides=""):
    return registry.hparams("transformer_tiny", ",".join(filter(None, [SMALL, overrides])))


def _train(output_dir, data_dir, steps, overrides="", **settings):
    settings = {"save_checkpoints_steps": 2, "log_steps": 1, "evaluate": False, **settings}
    run = trainer.RunSettings(output_dir=str(output_dir), data_dir=data_dir, train_steps=steps, **settings)
    return trainer.train(registry.problem("translate_ende_multi30k"), _hparams(overrides), run, tf.distribute.OneDeviceStrategy("/cpu:0"))


def test_trains_writes_the_run_record_and_evaluates(multi30k_data_dir, tmp_path):
    result = _train(tmp_path / "run", multi30k_data_dir, 4, eval_sentences=8, evaluate=True, eval_steps=3, alpha_grid=(0.6, 2.0),
                    alpha_sentences=12)
    assert result["step"] == 4 and np.isfinite(result["loss"])
    assert set(result["eval"]) == {"loss", "nll", "perplexity", "accuracy", "shuffled_source_nll", "source_gap", "tokens", "bleu", "chrf"}
    assert 0 <= result["eval"]["bleu"] <= 100 and result["eval"]["perplexity"] > 1
    run_dir = RunDir(tmp_path / "run")
    assert run_dir.hparams() == _hparams()
    assert run_dir.run_info()["problem"] == "translate_ende_multi30k"
    expected = registry.problem("translate_ende_multi30k").load_vocabularies(multi30k_data_dir)
    assert [v.sha256 for v in run_dir.vocabularies()] == [v.sha256 for v in expected]
    assert [os.path.basename(p) for p in run_dir.checkpoints()] == ["ckpt-2", "ckpt-4"]
    assert os.listdir(tmp_path / "run" / "train") and os.listdir(tmp_path / "run" / "eval")  # TensorBoard events
    model, path = restore_model(run_dir)
    assert path.endswith("ckpt-4") and model.count_params() > 0

    # The run's decode default alpha: the grid's best on the first 12 dev sentences, as a Translator decodes them.
    from t2t_keras.decoding.trained_run import TrainedRun
    from t2t_keras.translator import Translator

    choice = run_dir.run_info()["alpha_choice"]
    assert choice["sentences"] == 12
    assert result["alpha"] == run_dir.run_info()["decode_defaults"]["alpha"] == max((0.6, 2.0), key=lambda a: (choice["scores"][str(a)], -a))
    decode_kernels = run_dir.run_info()["decode_kernel_choices"]  # the kernels its dev decoding chose here
    assert {"step_product", "beam_candidates", "top_k", "int8_logits"} <= set(decode_kernels)
    problem = registry.problem("translate_ende_multi30k")
    sources, references = problem.dev_examples(multi30k_data_dir, 12)
    translator = Translator.from_preset(str(tmp_path / "run"))
    for alpha in (0.6, 2.0):
        score = problem.score_outputs(translator.generate(sources, alpha=alpha), references).value
        assert choice["scores"][str(alpha)] == pytest.approx(score, abs=0.01), alpha
    assert translator.settings.alpha == result["alpha"] and TrainedRun.resolve(str(tmp_path / "run"), "alpha=1.1").decode_hparams.alpha == 1.1
    # Chosen under the default stop (recorded), the alpha is not one for exact search: asked without an alpha, refused.
    assert (choice["beam_size"], choice["exact_search"]) == (translator.settings.beam_size, False)
    with pytest.raises(UsageError, match=r"^--decode_hparams: exact_search=true with alpha .* give the alpha too"):
        TrainedRun.resolve(str(tmp_path / "run"), "beam_size=2,exact_search=true")
    with pytest.raises(UsageError, match=r"^generate: exact_search=true with alpha"):
        translator.generate(sources[:1], exact_search=True)
    assert TrainedRun.resolve(str(tmp_path / "run"), {"exact_search": True, "alpha": 1.5}).decode_hparams.alpha == 1.5


def test_a_resume_keeps_the_kernel_choices_and_adds_its_part_to_the_training_log(multi30k_data_dir, tmp_path, monkeypatch):
    """A new run times each kernel alternative once and records the choice in run.json; a
    resume keeps it without timing (so it ends as an uninterrupted run would); forced over
    kept is tests/training/test_kernel_choices.py's. Each start's steps, tokens, seconds and
    CPU go to run.json's training log."""
    calls = []

    def measure(name, model, hparams):
        calls.append(name)
        return {"graph": 2.0, "native": 1.0} if name in kernel_choices.NATIVE else {"rows": 2.0, "rows_copy": 3.0, "columns": 1.0}

    monkeypatch.setattr(kernel_choices, "_Timings", lambda: measure)
    timed = ["loss_layout"] + (["layer_norm", "bias_relu"] if native.library() is not None else [])
    _train(tmp_path / "run", multi30k_data_dir, 2)
    recorded = RunDir(tmp_path / "run").run_info()["kernel_choices"]
    assert calls == timed and recorded["loss_layout"] == "columns"
    assert recorded["measured_ms"]["loss_layout"]["columns"] == 1.0
    _train(tmp_path / "run", multi30k_data_dir, 4)
    info = RunDir(tmp_path / "run").run_info()
    assert calls == timed and info["kernel_choices"] == recorded
    assert [(e["from_step"], e["to_step"]) for e in info["training"]] == [(0, 2), (2, 4)]
    assert all(e["target_tokens"] > 0 and e["seconds"] > 0 and e["replicas"] == 1 for e in info["training"])
    assert {e["cpu"] for e in info["training"]} == {system.cpu_model()}


def test_mixed_bfloat16_without_bfloat16_units_says_it_is_emulated(multi30k_data_dir, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(trainer, "bfloat16_units", lambda: None)
    caplog.set_level(logging.INFO)
    _train(tmp_path / "run", multi30k_data_dir, 1, "mixed_precision=mixed_bfloat16", kernel_choices={"loss_layout": "rows"})
    emulated = [r.getMessage() for r in caplog.records if "emulates its bfloat16 products" in r.getMessage()]
    assert len(emulated) == 1, emulated


def test_subword_sampling_reaches_the_training_pipeline(multi30k_data_dir, tmp_path, monkeypatch):
    """The hparam goes through tf.distribute's dataset function to a sampler per side (what they
    do to the pairs: tests/data/test_pipeline.py), and training runs on what they give."""
    alphas, resegmenter = [], Vocabulary.sampled_resegmenter

    def recorded(vocabulary, alpha):
        alphas.append(alpha)
        return resegmenter(vocabulary, alpha)

    monkeypatch.setattr(Vocabulary, "sampled_resegmenter", recorded)
    result = _train(tmp_path / "run", multi30k_data_dir, 2, "subword_sampling=0.1", kernel_choices={"loss_layout": "rows"})
    assert result["step"] == 2 and np.isfinite(result["loss"])
    assert alphas == [0.1, 0.1]


def test_resume_refusals_and_start_over(multi30k_data_dir, tmp_path):
    _train(tmp_path / "run", multi30k_data_dir, 2)
    written = (tmp_path / "run" / "shortlist.npz").read_bytes()
    (tmp_path / "run" / "shortlist.npz").unlink()  # as in a run dir of an earlier version
    assert _train(tmp_path / "run", multi30k_data_dir, 2) == {"step": 2, "already_done": True}
    assert (tmp_path / "run" / "shortlist.npz").read_bytes() == written  # the rerun wrote it, training no further
    with pytest.raises(UsageError, match=r"other architecture hparams \(num_hidden_layers: 2 -> 1\).*--start_over"):
        _train(tmp_path / "run", multi30k_data_dir, 4, "num_hidden_layers=1")
    # --start_over removes everything the trainer wrote: a table left from another corpus
    # (here: another run's, written over this one's) would have its token ids decoded.
    Shortlist(np.full([8000, 1], 7, np.int32), np.arange(3, 103, dtype=np.int32)).save(str(tmp_path / "run" / "shortlist.npz"))
    result = _train(tmp_path / "run", multi30k_data_dir, 2, "num_hidden_layers=1", start_over=True)
    assert result["step"] == 2 and RunDir(tmp_path / "run").hparams().num_hidden_layers == 1
    assert (tmp_path / "run" / "shortlist.npz").read_bytes() == written
    # A changed training hparam is allowed, and resumes from the checkpoint.
    assert _train(tmp_path / "run", multi30k_data_dir, 4, "num_hidden_layers=1,label_smoothing=0.2")["step"] == 4


def test_bad_input_is_reported_before_any_work(multi30k_data_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=r"--output_dir=.*file/run is not writable"):
        _train(blocker / "run", multi30k_data_dir, 2)
    with pytest.raises(UsageError, match=r"--data_dir=.*empty has no complete data for translate_ende_multi30k .*run t2t-keras-datagen --problem=translate_ende_multi30k"):
        os.makedirs(tmp_path / "empty")
        _train(tmp_path / "run", str(tmp_path / "empty"), 2)
    _train(tmp_path / "run", multi30k_data_dir, 2)
    vocabulary = tmp_path / "run" / "vocab.spm.model"  # as if trained on another data_dir's vocabulary
    trained_with = vocabulary.read_bytes()
    trained_with_another_vocabulary(vocabulary.parent, train_sentencepiece([f"line {i} of another corpus" for i in range(300)], 400))
    with pytest.raises(UsageError, match=r"holds a model trained with another vocabulary: its vocabulary \(\d+ pieces, not 8000\) "
                                         r"is not the one in --data_dir="):
        _train(tmp_path / "run", multi30k_data_dir, 4)
    trained_with_another_vocabulary(vocabulary.parent, trained_with)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(multi30k_data_dir, tmp_path, monkeypatch):
    real_update, calls = TrainStep.update, []

    def update_then_nan(self, iterator):
        calls.append(1)
        loss, tokens = real_update(self, iterator)
        return (loss * float("nan") if len(calls) == 3 else loss), tokens

    monkeypatch.setattr(TrainStep, "update", update_then_nan)
    with pytest.raises(trainer.TrainingStopped, match=r"the loss became nan at step 3; stopped without saving\. The last good checkpoint is .*ckpt-2"):
        _train(tmp_path / "run", multi30k_data_dir, 6)
    assert [os.path.basename(p) for p in RunDir(tmp_path / "run").checkpoints()] == ["ckpt-2"]


def test_averaging_two_checkpoints_is_their_elementwise_mean(multi30k_data_dir, tmp_path, monkeypatch):
    _train(tmp_path / "run", multi30k_data_dir, 4)
    run_dir = RunDir(tmp_path / "run")
    first, _ = restore_model(run_dir, str(tmp_path / "run" / "ckpt-2"))
    second, _ = restore_model(run_dir, str(tmp_path / "run" / "ckpt-4"))
    path = average_checkpoints(str(tmp_path / "run"), 2, str(tmp_path / "avg"))
    assert path.endswith("ckpt-4")  # keeps the newest averaged step
    assert (tmp_path / "avg" / "shortlist.npz").read_bytes() == (tmp_path / "run" / "shortlist.npz").read_bytes()
    averaged, _ = restore_model(RunDir(tmp_path / "avg"))
    changed = 0
    for a, b, mean in zip(first.get_weights(), second.get_weights(), averaged.get_weights()):
        np.testing.assert_allclose(mean, (a + b) / 2, rtol=1e-6, atol=1e-7)
        changed += not np.allclose(a, b)
    assert changed > 10  # the two checkpoints really differ
    with pytest.raises(UsageError, match="no checkpoint to average"):
        average_checkpoints(str(tmp_path / "nothing"), 2, str(tmp_path / "avg2"))
    # An earlier average is replaced; a trainer's run or foreign files never are.
    assert average_checkpoints(str(tmp_path / "run"), 1, str(tmp_path / "avg")).endswith("ckpt-4")
    assert RunDir(tmp_path / "avg").run_info()["averaged"] == [4]
    listing = sorted(os.listdir(tmp_path / "run"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("my precious notes\n")
    for target, message in ((tmp_path / "run", "--avg_dir must differ"), (tmp_path / "notes", "not a t2t-keras run")):
        with pytest.raises(UsageError, match=message):
            average_checkpoints(str(tmp_path / "run"), 1, str(target))
    shutil.copytree(tmp_path / "run", tmp_path / "other")  # another trainer's run
    with pytest.raises(UsageError, match=r"holds a run that is not an average .* never replaced"):
        average_checkpoints(str(tmp_path / "run"), 1, str(tmp_path / "other"))
    assert sorted(os.listdir(tmp_path / "run")) == listing and (tmp_path / "notes" / "mine.txt").read_text() == "my precious notes\n"
    assert sorted(os.listdir(tmp_path / "other")) == listing

    # A run started with a relative --output_dir has cwd-relative paths in its state file
    # (make demo's out/demo/train did): they still name the checkpoints of this directory.
    state = tmp_path / "run" / "checkpoint"
    state.write_text(re.sub(r'"[^"]*(ckpt-\d+)"', r'"run/\1"', state.read_text()))
    monkeypatch.chdir(tmp_path)
    assert [os.path.basename(p) for p in RunDir("run").checkpoints()] == ["ckpt-2", "ckpt-4"]
    assert average_checkpoints("run", 2, "avg_relative").endswith("ckpt-4")


def test_best_checkpoint_is_kept_by_dev_bleu_and_recorded(multi30k_data_dir, tmp_path, monkeypatch):
    scripted = iter([5.0, 9.0, 7.0, 8.5])
    monkeypatch.setattr(Evaluator, "evaluate", lambda self: {"loss": 1.0, "bleu": next(scripted)})
    _train(tmp_path / "run", multi30k_data_dir, 8, evaluate=True, eval_sentences=4, keep_best="bleu")
    record = {"step": 4, "metric": "bleu", "value": 9.0}
    info = RunDir(tmp_path / "run").run_info()
    assert info["best"] == record
    assert [(e["step"], e["bleu"]) for e in info["evaluations"]] == [(2, 5.0), (4, 9.0), (6, 7.0), (8, 8.5)]
    best = RunDir(tmp_path / "run" / "best")
    assert best.run_info()["best"] == record and "evaluations" not in best.run_info()
    assert [os.path.basename(p) for p in best.checkpoints()] == ["ckpt-4"]
    kept, _ = restore_model(best)
    trained, _ = restore_model(RunDir(tmp_path / "run"), str(tmp_path / "run" / "ckpt-4"))
    for a, b in zip(kept.get_weights(), trained.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert best.hparams() == RunDir(tmp_path / "run").hparams()

    # --keep_best must name a metric the run computes, and stay the same across resumes.
    with pytest.raises(UsageError, match="--keep_best=bleu needs the dev bleu: set --eval_sentences"):
        _train(tmp_path / "other", multi30k_data_dir, 2, evaluate=True, eval_sentences=0, keep_best="bleu")
    with pytest.raises(UsageError, match=r"best keeps the best checkpoint by bleu, not loss; use --keep_best=bleu"):
        _train(tmp_path / "run", multi30k_data_dir, 10, evaluate=True, eval_sentences=0, keep_best="loss")


def _trainer_cli(*args):
    return [sys.executable, "-m", "t2t_keras.bin.trainer", "--problem=translate_ende_multi30k", "--hparams_set=transformer_tiny", f"--hparams={SMALL}", *args]


# A seeded run without dropout (its data order goes on where a resume starts), saved and evaluated
# every 2 steps; each interrupted run below, resumed, must end as this one does.
SEEDED = ["--seed=7", SAME_KERNELS_FLAG, f"--hparams={SMALL},layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0",
          "--train_steps=12", "--log_steps=1"]
EVERY_2 = ["--save_checkpoints_steps=2", "--eval_steps=2", "--eval_sentences=0", "--keep_best=loss"]


@pytest.fixture(scope="module")
def uninterrupted(multi30k_data_dir, tmp_path_factory):
    """The output_dir of SEEDED + EVERY_2 trained to its end in one go."""
    output_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    result = subprocess.run(_trainer_cli(f"--output_dir={output_dir}", f"--data_dir={multi30k_data_dir}", *SEEDED, *EVERY_2),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return output_dir


def _training_state(output_dir, step):
    """Every variable of a trainer checkpoint (model weights, Adam's slots, the step), by name."""
    reader = tf.train.load_checkpoint(str(output_dir / f"ckpt-{step}"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith(("model/", "optimizer/"))}


def test_cli_bad_input_one_line(multi30k_data_dir, tmp_path):
    def run(*args):
        return subprocess.run(_trainer_cli(*args), capture_output=True, text=True)

    assert_one_line_error(run(f"--data_dir={multi30k_data_dir}"), "error: --output_dir is required")
    assert_one_line_error(run(f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'o'}", "--hparams=num_heads=3"),
                          "error: invalid hparams: hidden_size=128 is not divisible by num_heads=3")  # the last --hparams wins
    assert_one_line_error(run(f"--data_dir={tmp_path / 'none'}", f"--output_dir={tmp_path / 'o'}"),
                          "error: --data_dir=")
    assert_one_line_error(run(f"--data_dir={multi30k_data_dir}", f"--output_dir={tmp_path / 'o'}", f"--branch_from={tmp_path / 'none'}"),
                          "error: --branch_from=")  # the flag reaches the trainer
    assert_one_line_error(run(f"--data_dir={multi30k_data_dir}", f"--output_dir={tmp_path / 'o'}", "--alpha_sentences=-5"),
                          "error: --alpha_sentences=-5: give a count of dev sentences, or 0 for the --eval_sentences ones.")


def test_sigkill_then_resume_ends_as_an_uninterrupted_run_with_every_evaluation_and_the_best(multi30k_data_dir, uninterrupted, tmp_path):
    """Killed while writing a new best checkpoint (or else mid-training), then resumed: every
    checkpoint the state file names loads; the resumed run ends with the weights, Adam's slots
    and the step of the same run left alone (with --seed and no dropout the data order goes
    on where it stopped); every saved step is evaluated once; run.json's best record, best/'s
    record and its weights agree; nothing temporary is left."""
    output_dir = tmp_path / "run"
    command = _trainer_cli(f"--output_dir={output_dir}", f"--data_dir={multi30k_data_dir}", *SEEDED, *EVERY_2)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def moment():
        if (output_dir / "ckpt-4.index").exists() and (output_dir / ".incomplete.best").exists():
            return "writing best/"
        return "training" if (output_dir / "ckpt-8.index").exists() else None

    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if moment() and interrupt_while(process, moment, signal.SIGKILL):  # checked again while paused
            break
        time.sleep(0.001)
    process.wait()
    killed_while = moment()
    assert process.returncode == -signal.SIGKILL, "training ended before it could be killed"
    print(f"killed while {killed_while}")
    run_dir = RunDir(output_dir)
    assert run_dir.checkpoints(), "no checkpoint survived"
    for path in run_dir.checkpoints():  # every checkpoint the state file names loads
        restore_model(run_dir, path)

    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    resumed_from = int(result.stderr.split("Resuming from ")[1].split("(step ")[1].split(")")[0])
    assert resumed_from >= 2 and "trained to step 12" in result.stdout
    assert "Sharding callback" not in result.stderr, "TensorFlow's checkpoint INFO line reached the screen"
    assert "Saved " in result.stderr  # the package's own lines do

    resumed, alone = _training_state(output_dir, 12), _training_state(uninterrupted, 12)
    assert resumed.keys() == alone.keys()
    assert resumed["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == 12
    assert sum(name.startswith("optimizer/_variables/") for name in alone) > 100  # Adam's two slots per weight
    for name in alone:
        np.testing.assert_allclose(resumed[name], alone[name], rtol=0, atol=1e-6, err_msg=name)

    info = run_dir.run_info()
    evaluations = {e["step"]: e["loss"] for e in info["evaluations"]}
    assert set(evaluations) == {2, 4, 6, 8, 10, 12}, (killed_while, sorted(evaluations))
    best_step = min(evaluations, key=evaluations.get)
    assert info["best"] == {"step": best_step, "metric": "loss", "value": evaluations[best_step]}, killed_while
    best = RunDir(output_dir / "best")
    assert best.run_info()["best"] == info["best"]
    assert [os.path.basename(p) for p in best.checkpoints()] == [f"ckpt-{best_step}"]
    kept, _ = restore_model(best)
    trained, _ = restore_model(run_dir, str(output_dir / f"ckpt-{best_step}"))
    for a, b in zip(kept.get_weights(), trained.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not [name for name in os.listdir(output_dir) if "incomplete" in name or "previous" in name]


def _stop_at_a_step(command, signum, after_step):
    """Runs the trainer `command` and sends it `signum` once it logged step `after_step` (before
    its last): (its CompletedProcess, the seconds from the signal to its exit)."""
    process = popen_interruptible(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith(f"step {after_step}/"):
            assert interrupt_while(process, lambda: True, signum), "training ended before the signal"
            break
    signalled = time.perf_counter()
    stdout, rest = process.communicate(timeout=300)
    waited = time.perf_counter() - signalled
    return subprocess.CompletedProcess(command, process.returncode, stdout, "".join(lines) + rest), waited


def test_sigterm_and_ctrl_c_save_the_step_they_come_at_and_the_resumed_run_ends_as_an_uninterrupted_one(multi30k_data_dir, uninterrupted, tmp_path):
    """Preemption's SIGTERM between checkpoints, then Ctrl-C in the resumed run: each saves a
    checkpoint of the step it came at and ends in one line with 143 / 130; resumed again, the run
    ends with the weights, Adam's slots and step of the same run left alone (--seed, no dropout),
    which saved and evaluated every 2 steps where this one saves at its end only and never evaluates."""
    output_dir = tmp_path / "run"
    command = _trainer_cli(f"--output_dir={output_dir}", f"--data_dir={multi30k_data_dir}", *SEEDED, "--save_checkpoints_steps=12",
                           "--noevaluate")
    saved = []
    for signum, status, after_step in ((signal.SIGTERM, 143, 2), (signal.SIGINT, 130, 0)):
        result, waited = _stop_at_a_step(command, signum, after_step or saved[-1] + 2)
        assert result.returncode == status, result.stderr[-2000:]
        name = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}[signum]
        last = result.stderr.strip().splitlines()[-1]
        match = re.fullmatch(rf"{name}: stopped at step (\d+) of 12, saved as {re.escape(str(output_dir))}/ckpt-(\d+); "
                             "the same command continues from there.", last)
        assert match and match.group(1) == match.group(2), last
        saved.append(int(match.group(1)))
        assert (output_dir / f"ckpt-{saved[-1]}.index").exists() and saved[-1] < 12
        print(f"{name} at step {saved[-1]}: exited {waited:.1f} s after the signal")
    assert saved[0] < saved[1]
    assert f"Resuming from {output_dir}/ckpt-{saved[0]} (step {saved[0]})" in result.stderr
    info = RunDir(output_dir).run_info()
    assert [(entry["from_step"], entry["to_step"]) for entry in info["training"]] == [(0, saved[0]), (saved[0], saved[1])]

    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    resumed, alone = _training_state(output_dir, 12), _training_state(uninterrupted, 12)
    assert resumed.keys() == alone.keys()
    for name in alone:
        np.testing.assert_allclose(resumed[name], alone[name], rtol=0, atol=1e-6, err_msg=name)


def _truncate(checkpoint_path):
    """Half of a checkpoint's data file, as an interrupted copy between machines leaves it."""
    (data,) = [name for name in os.listdir(os.path.dirname(checkpoint_path))
               if name.startswith(os.path.basename(checkpoint_path) + ".data-")]
    path = os.path.join(os.path.dirname(checkpoint_path), data)
    os.truncate(path, os.path.getsize(path) // 2)
    return data


def test_a_damaged_checkpoint_is_passed_over_by_the_trainer_and_named_by_the_decoder_and_exporter(multi30k_data_dir, tmp_path, caplog):
    """The trainer resumes from the newest intact checkpoint and says which it passed over; the
    decoder and the exporter stop in one line naming the damaged file and the intact one to use."""
    output_dir = tmp_path / "run"

    def train(steps):
        settings = trainer.RunSettings(output_dir=str(output_dir), data_dir=multi30k_data_dir, train_steps=steps,
                                       save_checkpoints_steps=2, log_steps=2, evaluate=False, seed=3)
        with caplog.at_level(logging.INFO, logger="absl"):
            return trainer.train(registry.problem("translate_ende_multi30k"), _hparams(), settings,
                                 tf.distribute.OneDeviceStrategy("/cpu:0"))

    train(4)
    damaged_file = _truncate(str(output_dir / "ckpt-4"))
    caplog.clear()
    assert train(6)["step"] == 6
    passed_over = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert passed_over == [f"Checkpoint {output_dir}/ckpt-4 is damaged ({damaged_file}: Read less bytes than requested): "
                           f"passed over; resuming from {output_dir}/ckpt-2, the newest intact one."], passed_over
    assert f"Resuming from {output_dir}/ckpt-2 (step 2)" in caplog.text
    restore_model(RunDir(output_dir), str(output_dir / "ckpt-4"))  # written again, whole

    damaged_file = _truncate(str(output_dir / "ckpt-6"))
    source = tmp_path / "in.en"
    source.write_text("A dog runs.\n")
    decoder = [sys.executable, "-m", "t2t_keras.bin.decoder", f"--output_dir={output_dir}", f"--decode_from_file={source}",
               f"--decode_to_file={tmp_path / 'out.de'}"]
    exporter = [sys.executable, "-m", "t2t_keras.bin.exporter", f"--output_dir={output_dir}", f"--export_dir={tmp_path / 'export'}"]
    expected = (f"error: checkpoint {output_dir}/ckpt-6 is damaged ({damaged_file}: Read less bytes than requested); the "
                f"newest intact one is {output_dir}/ckpt-4: pass --checkpoint_path={output_dir}/ckpt-4.")
    for result in run_side_by_side([decoder, exporter]):
        assert_one_line_error(result, expected)
    assert not (tmp_path / "out.de").exists() and not (tmp_path / "export").exists()


def test_early_stopping_after_patience_evaluations_without_a_better_loss_and_across_a_resume(multi30k_data_dir, tmp_path, monkeypatch):
    # Dev losses of steps 2, 4, 6, then (resumed, as after a kill) 6 again and 8.
    scripted = iter([5.0, 4.0, 4.5, 4.5, 4.2])
    monkeypatch.setattr(Evaluator, "evaluate", lambda self: {"loss": next(scripted)})
    first = _train(tmp_path / "run", multi30k_data_dir, 6, evaluate=True, eval_sentences=0, early_stopping_patience=2)
    assert "early_stopped" not in first  # one evaluation (step 6) without improvement so far
    result = _train(tmp_path / "run", multi30k_data_dir, 20, evaluate=True, eval_sentences=0, early_stopping_patience=2)
    assert result["step"] == 8
    assert result["early_stopped"] == {"step": 8, "best_step": 4, "metric": "loss", "patience": 2}
    assert os.path.basename(RunDir(tmp_path / "run").latest_checkpoint()) == "ckpt-8"
    assert RunDir(tmp_path / "run").run_info()["best"]["step"] == 4
    again = _train(tmp_path / "run", multi30k_data_dir, 20, evaluate=True, eval_sentences=0, early_stopping_patience=2)
    assert again["already_done"] and again["early_stopped"]["step"] == 8
    with pytest.raises(UsageError, match="--early_stopping_patience needs a dev metric"):
        _train(tmp_path / "other", multi30k_data_dir, 2, evaluate=False, early_stopping_patience=2)


def test_resume_with_other_settings_says_what_changes(multi30k_data_dir, tmp_path, monkeypatch, caplog):
    """A longer --train_steps moves a cooldown (one line with the rate it gives); --eval_sentences=0
    under --keep_best=auto keeps best/ by its BLEU instead of refusing the resume."""
    caplog.set_level(logging.INFO)
    absl_logger = absl_logging.get_absl_logger()  # at INFO, whatever an earlier test left it at
    previous_level = absl_logger.level
    absl_logger.setLevel(logging.INFO)
    try:
        _resume_with_other_settings(multi30k_data_dir, tmp_path, monkeypatch, caplog)
    finally:
        absl_logger.setLevel(previous_level)


def _resume_with_other_settings(multi30k_data_dir, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(Evaluator, "evaluate", lambda self: {"loss": 3.0, "bleu": 1.0})
    cooldown = "learning_rate_cooldown_steps=4"
    _train(tmp_path / "run", multi30k_data_dir, 4, cooldown, evaluate=True, eval_sentences=4)
    assert RunDir(tmp_path / "run").run_info()["best"]["metric"] == "bleu"
    caplog.clear()
    _train(tmp_path / "run", multi30k_data_dir, 6, cooldown, evaluate=True, eval_sentences=0)
    lines = [record.getMessage() for record in caplog.records]
    moved = [line for line in lines if line.startswith("The learning rate cools down to 0")]
    assert len(moved) == 1 and "(was 4, now 6): from step 4 it is" in moved[0] and "--warm_start_from=" in moved[0], lines
    assert any("best is kept by dev bleu, which --eval_sentences=0 does not compute" in line for line in lines), lines


def test_a_branch_continues_the_runs_training_state_and_leaves_it_as_it_was(multi30k_data_dir, tmp_path):
    """--branch_from=RUN/ckpt-2 with the run's own --train_steps ends with the run's weights, Adam's
    slots and step (seeded, no dropout: the data order goes on where ckpt-2 was); the run itself is
    untouched; the branch records where it came from and its own checkpoints from step 2.
    Refused: an average (weights only), a step not below --train_steps, both start flags."""
    no_dropout = "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0,learning_rate_cooldown_steps=3"
    same = dict(seed=7, kernel_choices=SAME_KERNELS)
    _train(tmp_path / "trunk", multi30k_data_dir, 6, no_dropout, **same)
    trunk_before = _training_state(tmp_path / "trunk", 6)
    branch_point = str(tmp_path / "trunk" / "ckpt-2")
    result = _train(tmp_path / "branch", multi30k_data_dir, 6, no_dropout, branch_from=branch_point, **same)
    assert result["step"] == 6

    branch = RunDir(tmp_path / "branch")
    assert [os.path.basename(p) for p in branch.checkpoints()] == ["ckpt-2", "ckpt-4", "ckpt-6"]
    assert branch.run_info()["branched_from"] == branch_point
    assert [part["from_step"] for part in branch.run_info()["training"]] == [2]
    branched, trained = _training_state(tmp_path / "branch", 6), _training_state(tmp_path / "trunk", 6)
    assert branched.keys() == trained.keys() and branched["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == 6
    for name in trained:
        np.testing.assert_allclose(branched[name], trained[name], rtol=0, atol=1e-6, err_msg=name)
    for name, value in _training_state(tmp_path / "trunk", 6).items():  # the trunk as it was
        np.testing.assert_array_equal(value, trunk_before[name])
    assert [os.path.basename(p) for p in RunDir(tmp_path / "trunk").checkpoints()] == ["ckpt-2", "ckpt-4", "ckpt-6"]

    average_checkpoints(str(tmp_path / "trunk"), 2, str(tmp_path / "avg"))
    with pytest.raises(UsageError, match=r"--branch_from=.*avg holds model weights only .* --warm_start_from"):
        _train(tmp_path / "other", multi30k_data_dir, 8, no_dropout, branch_from=str(tmp_path / "avg"))
    with pytest.raises(UsageError, match=r"--branch_from=.*ckpt-6 is at step 6: give a --train_steps above it \(now 6\)"):
        _train(tmp_path / "other", multi30k_data_dir, 6, no_dropout, branch_from=str(tmp_path / "trunk" / "ckpt-6"))
    with pytest.raises(UsageError, match="--warm_start_from and --branch_from both start a run"):
        _train(tmp_path / "other", multi30k_data_dir, 8, no_dropout, branch_from=branch_point, warm_start_from=branch_point)
    assert not (tmp_path / "other" / "ckpt-6.index").exists()


def test_early_residual_dropout_trains_the_first_updates_then_p_drop_takes_over(multi30k_data_dir, tmp_path):
    """P_drop 0.3 with layer_prepostprocess_dropout_early=0 for 2 updates, against the same run with
    the early rate for all 4 (seeded, no other dropout, the same model built): equal to the last
    bit at ckpt-2 (the early rate is what trained), not at ckpt-4 (P_drop came on after the retrace).
    The schedule holds P_drop's layers only (not attention's or the FFN's), changes their rate
    once, and a model whose P_drop is 0 drops out at the early rate while it lasts."""
    base = "attention_dropout=0,relu_dropout=0,layer_prepostprocess_dropout=0.3,layer_prepostprocess_dropout_early=0"
    same = dict(seed=7, kernel_choices=SAME_KERNELS)
    for name, early_steps in (("switched", 2), ("early", 4)):
        seed_generators("the same initial weights")
        _train(tmp_path / name, multi30k_data_dir, 4, f"{base},layer_prepostprocess_dropout_early_steps={early_steps}", **same)
    for step, equal in ((2, True), (4, False)):
        switched, early = _training_state(tmp_path / "switched", step), _training_state(tmp_path / "early", step)
        weights = [name for name in early if name.startswith("model/")]
        assert all(np.array_equal(switched[name], early[name]) for name in weights) == equal, f"ckpt-{step}"

    hparams = _hparams("layer_prepostprocess_dropout=0,layer_prepostprocess_dropout_early=0.5,"
                       "layer_prepostprocess_dropout_early_steps=3,attention_dropout=0,relu_dropout=0")
    model = Transformer.from_hparams(hparams, vocab_size=50)
    schedule = ResidualDropoutSchedule(model, hparams)
    assert len(schedule.layers) == 1 + 5 * hparams.num_hidden_layers  # embeddings; 2 + 3 sub-layers a layer pair
    features = {"inputs": tf.constant([[5, 6, 7, 1]]), "targets": tf.constant([[8, 9, 1, 0]])}
    assert [schedule.set_for(step) for step in range(3)] == [False] * 3  # built at the higher rate, 0.5
    assert not np.allclose(model(features, training=True), model(features, training=False))
    assert [schedule.set_for(step) for step in range(3, 5)] == [True, False]
    np.testing.assert_array_equal(model(features, training=True), model(features, training=False))


def test_sigterm_during_the_alpha_choice_stops_at_once_and_the_same_command_chooses_it(trained_output_dir,
                                                                                     multi30k_data_dir, tmp_path,
                                                                                     monkeypatch):
    """A run at its last step without its evaluation and alpha choice (trained with --noevaluate,
    or stopped during them) gets both from the same command; SIGTERM during the alpha choice
    stops it at once (Stopped, 143), the checkpoint kept and no choice recorded, and the next
    start makes it, where before a finished run said "nothing to do" and never got one."""
    from t2t_keras.errors import Stopped

    shutil.copytree(trained_output_dir, tmp_path / "run")  # at step 30 of 30, never evaluated
    settings = trainer.RunSettings(output_dir=str(tmp_path / "run"), data_dir=multi30k_data_dir, train_steps=30,
                                   eval_steps=1, eval_sentences=4, alpha_grid=(0.6, 1.0))
    choose_alpha = trainer.choose_alpha
    sent = []

    def signalled_choice(*args):
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's stop arrives
        return choose_alpha(*args)

    monkeypatch.setattr(trainer, "choose_alpha", signalled_choice)
    with pytest.raises(Stopped, match=r"^SIGTERM: stopped while choosing the decoding alpha at step 30 \(the checkpoint "
                                      r"is kept\); the same command chooses it\.$") as stopped:
        trainer.train(registry.problem("translate_ende_multi30k"), _hparams(), settings, tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert stopped.value.status == 143 and time.monotonic() - sent[0] < 2.0
    run_dir = RunDir(settings.output_dir)
    assert "alpha_choice" not in run_dir.run_info() and (tmp_path / "run" / "ckpt-30.index").exists()

    monkeypatch.setattr(trainer, "choose_alpha", choose_alpha)
    result = trainer.train(registry.problem("translate_ende_multi30k"), _hparams(), settings,
                           tf.distribute.OneDeviceStrategy("/cpu:0"))
    info = run_dir.run_info()
    assert result["alpha"] == info["decode_defaults"]["alpha"] and info["alpha_choice"]["step"] == 30
    assert [e["step"] for e in info["evaluations"]] == [30]
    assert trainer.train(registry.problem("translate_ende_multi30k"), _hparams(), settings,
                         tf.distribute.OneDeviceStrategy("/cpu:0")).get("already_done")

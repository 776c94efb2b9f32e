"""Fine-tuning: --warm_start_from a trained run, with its vocabulary through datagen --vocab_model;
weights-only directories are refused in one line."""

import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.checkpoints import RunDir, average_checkpoints, restore_model
from t2t_keras.data import datagen
from t2t_keras.data.tokenizers import given_vocabularies
from t2t_keras.decoding.shortlist import Shortlist, load_run_shortlist
from t2t_keras.errors import UsageError
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.training import trainer
from t2t_keras.training.evaluator import Evaluator
from t2t_keras.optimization.recipe import make_optimizer
from tests.testing import assert_one_line_error

ONE_DEVICE = tf.distribute.OneDeviceStrategy("/cpu:0")


def _text_problem(tmp_path, first, count):
    """translate_text over Multi30k train lines [first, first + count) and 100 val lines."""
    paths = {}
    for split, name, lines in (("train", "train", slice(first, first + count)), ("dev", "val", slice(0, 100))):
        for side, language in (("source", "en"), ("target", "de")):
            with gzip.open(os.path.join(MULTI30K_DIR, f"{name}.{language}.gz"), "rt", encoding="utf-8") as handle:
                text = handle.read().splitlines()[lines]
            path = tmp_path / f"{split}.{language}"
            path.write_text("\n".join(text) + "\n", encoding="utf-8")
            paths[f"{split}_{side}"] = str(path)
    problem = registry.problem("translate_text")
    return problem.configure(problem.settings_from_flags({**paths, "vocab_size": 500}))


@pytest.fixture(scope="module")
def adaptation_data(trained_output_dir, tmp_path_factory):
    """New data (Multi30k lines the parent did see, but another problem) in the parent's vocabulary."""
    root = tmp_path_factory.mktemp("adaptation")
    problem = _text_problem(root, 20000, 2000)
    data = str(root / "data")
    datagen.generate(problem, data, None, progress=False, vocabularies=given_vocabularies(trained_output_dir))
    return problem, data


def test_warm_start_begins_at_step_zero_with_the_parents_weights_and_a_fresh_optimizer(
        trained_output_dir, adaptation_data, tmp_path):
    problem, data = adaptation_data
    parent = RunDir(trained_output_dir)
    parent_model, parent_checkpoint = restore_model(parent)
    parent_hparams = parent.hparams()
    parent_loss = Evaluator(problem, data, parent_model, parent.vocabularies(), parent_hparams, ONE_DEVICE,
                            score_sentences=0).evaluate()["loss"]

    # Training hparams may differ from the parent's: more dropout, another learning rate.
    child_hparams = registry.hparams("transformer_tiny", _child_overrides(parent_hparams))
    settings = trainer.RunSettings(output_dir=str(tmp_path / "child"), data_dir=data, train_steps=2,
                                   save_checkpoints_steps=2, log_steps=1, eval_sentences=0,
                                   warm_start_from=trained_output_dir)
    trainer.train(problem, child_hparams, settings, ONE_DEVICE)
    child = RunDir(tmp_path / "child")
    info = child.run_info()
    assert info["warm_started_from"] == parent_checkpoint
    assert [e["step"] for e in info["evaluations"]] == [0, 2]
    assert info["evaluations"][0]["loss"] == pytest.approx(parent_loss, abs=1e-3)
    assert info["problem"] == "translate_text" and info["problem_settings"] == problem.settings
    # The child's shortlist: its own pairs' candidates alternating with the parent's.
    own = Shortlist.from_data_dir(problem, data, parent.vocabularies())
    expected = own.merged(load_run_shortlist(parent))
    np.testing.assert_array_equal(load_run_shortlist(child).candidates, expected.candidates)
    assert not np.array_equal(expected.candidates, own.candidates)

    # ckpt-0 is the parent's weights with an optimizer that has taken no step.
    child_model = registry.model("transformer").from_hparams(child_hparams, parent.vocabularies().source.size)
    optimizer = make_optimizer(child_hparams, 2)
    optimizer.build(child_model.trainable_variables)
    tf.train.Checkpoint(model=child_model, optimizer=optimizer).restore(str(tmp_path / "child" / "ckpt-0")).assert_consumed()
    assert int(optimizer.iterations) == 0
    slots = [v for v in optimizer.variables if v is not optimizer.iterations and "learning_rate" not in v.path]
    assert slots and all(not np.any(v.numpy()) for v in slots)
    for ours, theirs in zip(child_model.get_weights(), parent_model.get_weights()):
        np.testing.assert_array_equal(ours, theirs)


def _child_overrides(parent_hparams):
    """The parent's architecture, with other training hparams."""
    from tests.conftest import TRAINED_HPARAMS

    assert parent_hparams == registry.hparams("transformer_tiny", TRAINED_HPARAMS)
    return TRAINED_HPARAMS + ",layer_prepostprocess_dropout=0.3,learning_rate=0.5"


def test_warm_start_refuses_another_vocabulary_or_architecture(trained_output_dir, adaptation_data, tmp_path):
    problem, data = adaptation_data
    own = _text_problem(tmp_path, 0, 1000)  # its own 500-piece vocabulary
    datagen.generate(own, str(tmp_path / "own"), None, progress=False)
    hparams = registry.hparams("transformer_tiny", _child_overrides(RunDir(trained_output_dir).hparams()))

    def warm_start(problem, data_dir, hparams, source=trained_output_dir):
        settings = trainer.RunSettings(output_dir=str(tmp_path / "child"), data_dir=data_dir, train_steps=2,
                                       warm_start_from=source, evaluate=False)
        trainer.train(problem, hparams, settings, ONE_DEVICE)

    with pytest.raises(UsageError, match=r"--warm_start_from=.*: its vocabulary \(8000 pieces, not \d+\) is not the one in "
                                         r"--data_dir=.*; make the data with t2t-keras-datagen --vocab_model="):
        warm_start(own, str(tmp_path / "own"), hparams)
    with pytest.raises(UsageError, match=r"other architecture hparams \(hidden_size: 32 -> 64\); --warm_start_from needs"):
        warm_start(problem, data, registry.hparams("transformer_tiny", _child_overrides(RunDir(trained_output_dir).hparams()) + ",hidden_size=64"))
    with pytest.raises(UsageError, match=r"--warm_start_from=.*nowhere: no such run dir or checkpoint"):
        warm_start(problem, data, hparams, str(tmp_path / "nowhere"))
    assert not os.path.exists(tmp_path / "child" / "ckpt-0.index")


def test_training_in_an_averaged_directory_is_one_line_naming_warm_start_from(trained_output_dir, multi30k_data_dir, tmp_path):
    from tests.conftest import TRAINED_HPARAMS

    average_checkpoints(trained_output_dir, 1, str(tmp_path / "train_avg"))
    copy = tmp_path / "copy_of_train_avg"
    shutil.copytree(tmp_path / "train_avg", copy)
    result = subprocess.run(
        [sys.executable, "-m", "t2t_keras.bin.trainer", "--problem=translate_ende_multi30k", "--hparams_set=transformer_tiny",
         f"--hparams={TRAINED_HPARAMS}", f"--data_dir={multi30k_data_dir}", f"--output_dir={copy}", "--train_steps=40"],
        capture_output=True, text=True,
    )
    assert_one_line_error(result, f"error: --output_dir={copy} holds model weights only")
    assert f"use --warm_start_from={copy} with a new --output_dir" in result.stderr
    assert sorted(os.listdir(copy)) == sorted(os.listdir(tmp_path / "train_avg"))  # untouched


def test_datagen_for_fine_tuning_takes_the_parents_languages_and_says_it_copied_the_vocabulary(trained_output_dir, tmp_path):
    problem = _text_problem(tmp_path, 20000, 300)
    train, dev = problem.settings["train"][0], problem.settings["dev"][0]
    result = subprocess.run(
        [sys.executable, "-m", "t2t_keras.bin.datagen", "--problem=translate_text", f"--data_dir={tmp_path / 'data'}",
         f"--vocab_model={trained_output_dir}", f"--train_source={train[0]}", f"--train_target={train[1]}",
         f"--dev_source={dev[0]}", f"--dev_target={dev[1]}", "--noprogress"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("translate_text: copied --vocab_model vocabulary translate_text.spm.model (8000 pieces)")
    settings = json.loads((tmp_path / "data" / "translate_text.manifest.json").read_text())["settings"]
    assert (settings["source_language"], settings["target_language"]) == ("en", "de")  # translate_ende_multi30k's

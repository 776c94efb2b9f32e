"""Checkpoint averaging (section 6.1: the last 5 checkpoints for base, 20 for big)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.errors import UsageError
from t2t_keras.run_dir import CHECKPOINT_PREFIX, RunDir, checkpoint_step


def build_model(run_dir: RunDir):
    """The model an output_dir describes (hparams.json + vocabulary), with fresh weights."""
    hparams = run_dir.hparams()
    return registry.model(hparams.model).from_hparams(hparams, run_dir.vocabulary().size)


def restore_model(run_dir: RunDir, checkpoint_path: str | None = None):
    """The model of `run_dir` with the weights of `checkpoint_path` (default: the latest)."""
    path = run_dir.require_checkpoint(checkpoint_path)
    model = build_model(run_dir)
    tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
    return model, path


def average_checkpoints(output_dir: str, num_last: int, avg_dir: str) -> str:
    """Writes the element-wise mean of the model weights of the last `num_last` checkpoints.

    `avg_dir` becomes an output_dir of its own (hparams.json, run.json, vocabulary and one
    checkpoint named after the newest averaged step), so the decoder and the exporter take it
    like any other. Returns the new checkpoint's path.
    """
    source = RunDir(output_dir)
    paths = source.checkpoints()
    if not paths:
        raise UsageError(f"--output_dir={output_dir} has no checkpoint to average; train first.")
    if num_last < 1:
        raise UsageError("--num_last_checkpoints must be at least 1.")
    paths = paths[-num_last:]
    if os.path.abspath(avg_dir) == os.path.abspath(output_dir):
        raise UsageError("--avg_dir must differ from --output_dir (the average would join the checkpoints it averages).")
    model = build_model(source)
    checkpoint = tf.train.Checkpoint(model=model)
    sums = [np.zeros(w.shape, np.float64) for w in model.weights]
    for path in paths:
        checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
        for total, weight in zip(sums, model.weights):
            total += weight.numpy()
    for weight, total in zip(model.weights, sums):
        weight.assign((total / len(paths)).astype(weight.dtype))

    target = RunDir(avg_dir)
    target.ensure_writable()
    for name in ("hparams.json", "run.json", "vocab.spm.model"):
        shutil.copyfile(os.path.join(source.path, name), os.path.join(target.path, name + ".incomplete"))
        os.replace(os.path.join(target.path, name + ".incomplete"), os.path.join(target.path, name))
    step = checkpoint_step(paths[-1])
    manager = tf.train.CheckpointManager(checkpoint, target.path, max_to_keep=None, checkpoint_name=CHECKPOINT_PREFIX)
    return manager.save(checkpoint_number=step)

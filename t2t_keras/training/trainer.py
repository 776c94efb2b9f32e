"""The training loop: the paper's recipe under a tf.distribute strategy, with checkpoints
that survive a kill, periodic evaluation with real BLEU, the best checkpoint kept, progress
logs and TensorBoard.

    train(problem, hparams, RunSettings(output_dir=..., data_dir=..., train_steps=...), strategy)

Three rooms: the run resolved and checked before any model is built (`run_plan.RunPlan`), the
loop here, and what the run records as it goes (`records`). A rerun resumes from the latest
intact checkpoint: weights, optimizer slots and the global step, from which the
learning-rate schedule continues; the restored checkpoint is evaluated again, so an
evaluation a kill interrupted is never missing from the record. SIGTERM and Ctrl-C save the
step they come at before the run stops (`stop_signals`).

Each evaluation is appended to run.json ("evaluations"); with `keep_best`, the checkpoint
with the best dev metric so far is kept as output_dir/best (see `checkpoints.BestCheckpoint`).

A loop of its own rather than Keras' `fit` (which trains the same model with the same loss,
optimizer and schedule: `Transformer.compile`, tests/models/test_keras_way.py): every update
divides the loss summed over all replicas and accumulated batches by their global token count
(fit averages per-replica means), the output layer's loss is one fused kernel whose layout is
timed on the machine (`kernel_choices`), a seeded run resumed after a kill skips the batches
it trained on and ends as an uninterrupted one, and evaluations decode the dev set for BLEU or
F1 and keep the best checkpoint.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time

import tensorflow as tf
from absl import logging

from t2t_keras import files, locks
from t2t_keras.checkpoints import checkpoint_manager, checkpoint_step, restore_model
from t2t_keras.decoding.shortlist import load_run_shortlist
from t2t_keras.errors import Stopped, UsageError
from t2t_keras.hparams_lib import HParams
from t2t_keras.models import factory
from t2t_keras.optimization.recipe import make_optimizer, moved_cooldown_note
from t2t_keras.system import bfloat16_units
from t2t_keras.training import kernel_choices, vocabulary_update
from t2t_keras.training.distribution import is_chief, is_multi_worker
from t2t_keras.training.dropout_schedule import ResidualDropoutSchedule
from t2t_keras.training.evaluator import Evaluator
from t2t_keras.training.records import EvaluationRecorder, ProgressWindow, TrainingLog, choose_alpha, duration, summary_writers
from t2t_keras.training.run_plan import RunPlan, RunSettings
from t2t_keras.training.stop_signals import StopNow, StopSignals, describe, exit_status
from t2t_keras.training.train_step import TrainStep

__all__ = ["RunSettings", "TrainingStopped", "train"]


class TrainingStopped(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says what was kept."""


def train(problem, hparams: HParams, settings: RunSettings, strategy: tf.distribute.Strategy) -> dict:
    """Trains to `settings.train_steps`; returns {"step", "loss", "eval": {...}} of the end. The
    run dir is held by this trainer (its chief, in a multi-worker job) until it ends: another
    trainer on it is refused (`locks`)."""
    if not is_chief(strategy):
        return _train(problem, hparams, settings, strategy)
    files.ensure_writable_dir(settings.output_dir, "--output_dir")
    with locks.holding(os.path.join(settings.output_dir, locks.LOCK_FILE), "--output_dir", settings.output_dir):
        return _train(problem, hparams, settings, strategy)


def _train(problem, hparams: HParams, settings: RunSettings, strategy: tf.distribute.Strategy) -> dict:
    plan = RunPlan.resolve(problem, hparams, settings, strategy)
    if plan.done:
        return plan.done
    run_dir, chief, start_step = plan.run_dir, plan.chief, plan.start_step
    best = plan.write_records()
    with strategy.scope():
        model = factory.build_model(hparams, plan.vocabularies, plan.structure_tokens, dtype=hparams.mixed_precision)
        optimizer = make_optimizer(hparams, settings.train_steps)
        train_step = TrainStep(model, optimizer, hparams, strategy)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    if plan.resume_from:
        note = moved_cooldown_note(hparams, start_step, plan.previous_train_steps, settings.train_steps)
        if note:
            logging.info("%s To train on with a fresh schedule, use --warm_start_from=%s and a new --output_dir.",
                         note, run_dir.path)
    kernels = kernel_choices.choose(model, hparams, settings.kernel_choices, plan.kept_kernels)
    if hparams.mixed_precision == "mixed_bfloat16" and bfloat16_units() is None:
        logging.warning("mixed_bfloat16 on a machine without bfloat16 units (AVX512_BF16, AMX or a GPU): TensorFlow "
                        "emulates its bfloat16 products here, no faster than float32.")
    if chief:
        run_dir.write_run_info({**run_dir.run_info(), "kernel_choices": kernels})
    checkpoint_dir = run_dir.path if chief else tempfile.mkdtemp(prefix="t2t_keras_worker_ckpt_")
    manager = checkpoint_manager(checkpoint, checkpoint_dir, settings.keep_checkpoint_max)
    latest = _restore(plan, model, checkpoint, manager, strategy)

    # With a seed, the data order is a function of it, and a resumed run skips what was trained on.
    skip = start_step * hparams.gradient_accumulation_steps if settings.seed is not None else 0
    dataset = strategy.distribute_datasets_from_function(
        lambda context: problem.dataset(
            "train", settings.data_dir, hparams.tokens_per_batch, training=True, max_length=hparams.max_length,
            input_context=context, seed=settings.seed, subword_sampling=hparams.subword_sampling,
            alignments=bool(hparams.guided_alignment_weight),
        ).skip(skip)
    )
    score_sentences = settings.eval_sentences if chief else 0
    decode_hparams = plan.decode_hparams
    shortlist = load_run_shortlist(run_dir) if score_sentences and decode_hparams.shortlist else None
    evaluator = (
        Evaluator(problem, settings.data_dir, model, plan.vocabularies, hparams, strategy, settings.eval_steps,
                  score_sentences, decode_hparams, shortlist, selects_by_score=plan.best_metric == problem.score_name)
        if settings.evaluate else None
    )
    if evaluator is not None and score_sentences:  # the kernels its dev decoding chose on this machine
        run_dir.write_run_info({**run_dir.run_info(),
                                "decode_kernel_choices": evaluator.translator.search_module().kernels.record()})
    writers = summary_writers(run_dir.path, chief)
    recorder = EvaluationRecorder(evaluator, writers["eval"], run_dir if chief else None, best, model,
                                  settings.early_stopping_patience)
    try:
        with StopSignals(strategy) as stops:
            if latest and evaluator is not None:  # it may have been saved but not evaluated before a kill
                try:
                    with stops.interruptible():
                        recorder.evaluate(start_step)
                except StopNow:
                    raise Stopped(f"{describe(stops.received)}: stopped before training on from {latest}, which is "
                                  "kept; the same command continues from there.", exit_status(stops.received)) from None
            log = TrainingLog(run_dir if chief else None, start_step, strategy.num_replicas_in_sync)
            dropout = ResidualDropoutSchedule(model, hparams)
            result = _loop(train_step, dropout, iter(dataset), manager, recorder, writers, settings, start_step,
                           run_dir, log, stops)
            if stops.received:  # at the last step, its evaluation cut short
                raise Stopped(f"{describe(stops.received)}: stopped at step {result['step']} before its evaluation was "
                              "recorded (the checkpoint is kept); the same command evaluates it.",
                              exit_status(stops.received))
            if chief and evaluator is not None and score_sentences and settings.alpha_grid:
                try:
                    with stops.interruptible():
                        result["alpha"] = choose_alpha(evaluator, run_dir, settings.alpha_grid, result["step"],
                                                      settings.alpha_sentences)
                except StopNow:
                    raise Stopped(f"{describe(stops.received)}: stopped while choosing the decoding alpha at step "
                                  f"{result['step']} (the checkpoint is kept); the same command chooses it.",
                                  exit_status(stops.received)) from None
            return result
    finally:
        if chief:
            run_dir.remove_incomplete_saves()  # of a save cut short (no space, a signal)
        else:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)


def _restore(plan: RunPlan, model, checkpoint, manager, strategy) -> str | None:
    """Restores the state `plan` starts from (its own checkpoint, a warm start's weights, a
    branch's training state); returns the checkpoint of this run that holds it, or None."""
    if plan.resume_from:
        checkpoint.restore(plan.resume_from).assert_existing_objects_matched()
        logging.info("Resuming from %s (step %d%s).", plan.resume_from, plan.start_step, _fingerprint(model, strategy))
        return plan.resume_from
    if plan.warm_start and plan.updates_vocabulary:
        parent_model, _ = restore_model(plan.parent.run_dir, plan.warm_start)
        vocabulary_update.warm_start(model, parent_model, plan.parent.run_dir.vocabularies(), plan.vocabularies,
                                     plan.settings.new_pieces)
        latest = manager.save(checkpoint_number=0)  # so a kill before the first save resumes from these weights
        logging.info("Warm-started from %s in this run's vocabulary: its weights, a fresh optimizer and schedule from "
                     "step 0 (%s).", plan.warm_start, latest)
        return latest
    if plan.warm_start:
        tf.train.Checkpoint(model=model).restore(plan.warm_start).expect_partial().assert_existing_objects_matched()
        latest = manager.save(checkpoint_number=0)  # so a kill before the first save resumes from these weights
        logging.info("Warm-started from %s: its weights, a fresh optimizer and schedule from step 0 (%s).",
                     plan.warm_start, latest)
        return latest
    if plan.branch_from:
        checkpoint.restore(plan.branch_from).assert_existing_objects_matched()
        latest = manager.save(checkpoint_number=plan.start_step)  # this run's own first checkpoint: a kill resumes here
        logging.info("Branched from %s: its weights, optimizer state and step %d, on to step %d here (%s).",
                     plan.branch_from, plan.start_step, plan.settings.train_steps, latest)
        return latest
    return None


def _fingerprint(model, strategy) -> str:
    """For a multi-worker job, a checksum of the restored weights: every worker logs the same one."""
    if not is_multi_worker(strategy):
        return ""
    total = sum(float(tf.reduce_sum(tf.cast(weight, tf.float64))) for weight in model.weights)
    return f"; weights checksum {total:.10e}"


def _loop(train_step, dropout, iterator, manager, recorder, writers, settings, start_step, run_dir, log, stops) -> dict:
    optimizer = train_step.optimizer
    step, last_saved, loss = start_step, manager.latest_checkpoint, float("nan")
    window = ProgressWindow(start_step)
    eval_metrics = {}
    if step < settings.train_steps:  # so that the first minute of a run is not silent
        logging.info("Training from step %d: the first step traces the training graph and fills the shuffle buffer; "
                     "then a progress line every %d steps.", step, settings.log_steps)
    if dropout.early_steps:
        logging.info("With %s.", dropout.describe())
    first_started = time.time()
    while step < settings.train_steps and not recorder.stopped:
        if dropout.set_for(step):
            train_step.retrace()
            if step > start_step:
                logging.info("Step %d: residual dropout %g from here on (the training graph is traced again).",
                             step, dropout.rate_after(step))
        try:
            loss_tensor, tokens_tensor = train_step.update(iterator)
            loss, tokens = float(loss_tensor), float(tokens_tensor)
        except tf.errors.DataLossError as e:
            raise UsageError(
                f"corrupt TFRecord data in --data_dir={settings.data_dir} ({e.message.splitlines()[0]}); "
                "rerun t2t-keras-datagen with --overwrite."
            ) from None
        step += 1
        if step == start_step + 1:
            logging.info("First step done in %.0f s.", time.time() - first_started)
        if not math.isfinite(loss):
            raise TrainingStopped(
                f"the loss became {loss} at step {step}; stopped without saving. The last good checkpoint is "
                f"{last_saved or 'none'}. Lower learning_rate, raise learning_rate_warmup_steps, or train in float32."
            )
        window.add(loss, tokens)
        log.add(tokens)
        if step % settings.log_steps == 0 or step == settings.train_steps:
            learning_rate = float(optimizer.learning_rate)
            stats = window.flush(step)
            eta = (settings.train_steps - step) / max(stats["steps_per_s"], 1e-9)
            logging.info(
                "step %d/%d  loss %.4f  lr %.3g  %.2f steps/s  %.0f tokens/s  ETA %s",
                step, settings.train_steps, stats["loss"], learning_rate, stats["steps_per_s"],
                stats["tokens_per_s"], duration(eta),
            )
            with writers["train"].as_default(step=step):
                for name, value in (*stats.items(), ("learning_rate", learning_rate)):
                    tf.summary.scalar(name, value)
        if step % settings.save_checkpoints_steps == 0 or step == settings.train_steps:
            last_saved = manager.save(checkpoint_number=step)
            logging.info("Saved %s.", last_saved)
            log.record(step)
            if recorder.evaluator is not None:
                try:
                    with stops.interruptible():
                        eval_metrics = recorder.evaluate(step)
                except StopNow:
                    pass  # stopped below; a resume evaluates this step again
        signum = stops.requested() if step < settings.train_steps else None
        if signum:
            if last_saved is None or checkpoint_step(last_saved) != step:
                last_saved = manager.save(checkpoint_number=step)
                log.record(step)
            for writer in writers.values():
                writer.flush()
            saved = os.path.join(run_dir.path, os.path.basename(last_saved))  # the chief's (a worker saves elsewhere too)
            raise Stopped(f"{describe(signum)}: stopped at step {step} of {settings.train_steps}, saved as {saved}; "
                          "the same command continues from there.", exit_status(signum))
    if recorder.stopped:
        stopped = recorder.stopped
        logging.info("Early stopping at step %d: no better dev %s in %d evaluations since step %d (kept in output_dir/best).",
                     step, stopped["metric"], stopped["patience"], stopped["best_step"])
    for writer in writers.values():
        writer.flush()
    result = {"step": step, "loss": loss, "eval": eval_metrics, "checkpoint": last_saved, "output_dir": run_dir.path}
    if recorder.stopped:
        result["early_stopped"] = recorder.stopped
    return result

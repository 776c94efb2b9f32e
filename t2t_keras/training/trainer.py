"""The training loop: the paper's recipe under a tf.distribute strategy, with checkpoints
that survive a kill, periodic evaluation with real BLEU, the best checkpoint kept, progress
logs and TensorBoard.

    train(problem, hparams, RunSettings(output_dir=..., data_dir=..., train_steps=...), strategy)

Everything that can be checked before training is checked first (writable output_dir, data
present, same architecture and vocabulary as the checkpoints already there, steps left to
do). A rerun resumes from the latest checkpoint that reads back whole (a damaged newer one,
an interrupted copy's, is passed over in one line): weights, optimizer slots and the global
step, from which the learning-rate schedule continues; the restored checkpoint is evaluated
again, so an evaluation a kill interrupted is never missing from the record. SIGTERM and
Ctrl-C save the step they come at before the run stops (`stop_signals`).

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

import dataclasses
import math
import os
import shutil
import tempfile
import time

import tensorflow as tf
from absl import logging

from t2t_keras import files
from t2t_keras.checkpoints import (
    BEST_DIR, BestCheckpoint, RunDir, checkpoint_manager, checkpoint_step, holds_training_state, intact_checkpoints,
    resolve_checkpoint,
)
from t2t_keras.decoding.shortlist import Shortlist, load_run_shortlist
from t2t_keras.errors import Stopped, UsageError
from t2t_keras.hparams_lib import MODEL, HParams
from t2t_keras.models import factory
from t2t_keras.system import bfloat16_units, cpu_model
from t2t_keras.training import kernel_choices
from t2t_keras.training.distribution import is_chief, is_multi_worker
from t2t_keras.training.dropout_schedule import ResidualDropoutSchedule
from t2t_keras.training.evaluator import Evaluator
from t2t_keras.training.stop_signals import StopNow, StopSignals, describe, exit_status
from t2t_keras.optimization.recipe import make_optimizer, make_schedule
from t2t_keras.training.train_step import TrainStep

KEEP_BEST_CHOICES = ("auto", "none", "loss")  # or the problem's score_name


class TrainingStopped(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says what was kept."""


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """Run settings (flags), as opposed to the model and recipe (hparams)."""

    output_dir: str
    data_dir: str
    train_steps: int
    eval_steps: int = 0  # dev batches per evaluation; 0 = the whole dev split
    save_checkpoints_steps: int = 1000  # also evaluate then
    keep_checkpoint_max: int = 20
    log_steps: int = 100
    eval_sentences: int = 100  # dev sentences decoded and scored (BLEU, F1) at each evaluation; 0 = none
    decode_hparams: str = ""  # overrides of the problem's decode defaults for that decoding, "beam_size=4,..."
    evaluate: bool = True
    # The dev metric that picks output_dir/best: "loss" (lowest), the problem's score (highest,
    # on eval_sentences: "bleu", "f1"), "none", or "auto" = the score when computed, else loss.
    keep_best: str = "auto"
    # Stop after this many evaluations in a row without a better `keep_best` metric; 0 = never.
    early_stopping_patience: int = 0
    # A run dir or checkpoint whose model weights start this run (at step 0, with a fresh
    # optimizer and schedule): fine-tuning. Ignored once output_dir has checkpoints of its own.
    warm_start_from: str | None = None
    # A checkpoint (or run dir) of another run whose whole training state (weights, optimizer,
    # step) this run continues from, in its own output_dir, under its own --train_steps: a
    # branch, e.g. the same run with its cooldown ending at another step. Ignored once
    # output_dir has checkpoints of its own.
    branch_from: str | None = None
    seed: int | None = None  # also makes the data order reproducible, across resumes too
    start_over: bool = False
    # Kernel alternatives forced by name ({"loss_layout": "columns"}); the others are timed at
    # start on this machine (training/kernel_choices.py).
    kernel_choices: dict = dataclasses.field(default_factory=dict)
    # At the end of training, the dev sentences (eval_sentences) are decoded with each of these
    # length-penalty alphas and the best becomes the run's decode default (run.json); () = none
    # (the trainer command's --alpha_grid gives five).
    alpha_grid: tuple = ()


def train(problem, hparams: HParams, settings: RunSettings, strategy: tf.distribute.Strategy) -> dict:
    """Trains to `settings.train_steps`; returns {"step", "loss", "eval": {...}} of the end."""
    if settings.warm_start_from and settings.branch_from:
        raise UsageError(
            "--warm_start_from and --branch_from both start a run from another one: give one (--warm_start_from takes its "
            "weights to step 0 with a fresh optimizer; --branch_from its whole training state at its step)."
        )
    run_dir = RunDir(settings.output_dir)
    chief = is_chief(strategy)
    if chief:
        run_dir.ensure_writable()
        removed = run_dir.remove_incomplete_saves()  # before training needs their space
        if removed:
            logging.info("Removed what checkpoint saves cut short left in %s: %s.", run_dir.path, ", ".join(removed))
    problem.configure_from_data_dir(settings.data_dir)  # a UsageError if datagen did not run
    vocabularies = problem.load_vocabularies(settings.data_dir)
    if not vocabularies.shared and hparams.shared_embedding_and_softmax_weights:
        raise UsageError(
            f"{problem.name} has separate source and target vocabularies: use an hparams set for it, or add "
            "--hparams=shared_embedding_and_softmax_weights=false."
        )
    structure_tokens = factory.structure_tokens(hparams, problem, vocabularies)
    decode_hparams = problem.decode_settings(settings.decode_hparams)
    _check_restart(run_dir, hparams, problem, vocabularies, settings, chief)
    best_metric = _best_metric(settings, problem.score_name, run_dir)
    latest = _agreed_latest_checkpoint(strategy, run_dir)
    if latest and not holds_training_state(run_dir, latest):
        _refuse_weights_only(run_dir)
    start_step = checkpoint_step(latest) if latest else 0
    kept_kernels = run_dir.run_info().get("kernel_choices") if latest and files.isfile(run_dir.run_path) else None
    # The parent run, resolved and checked once: its weights start a new run, and its shortlist
    # joins this one's (a resumed run has both already, unless its run dir predates shortlists).
    parent = None
    if settings.warm_start_from and (not latest or not files.isfile(run_dir.shortlist_path)):
        parent = _parent_run(settings.warm_start_from, "--warm_start_from", hparams, vocabularies, settings.data_dir)
    branch = None
    if settings.branch_from and not latest:
        branch = _branch_point(settings.branch_from, hparams, vocabularies, settings)
        start_step, kept_kernels = checkpoint_step(branch[1]), branch[0].run_info().get("kernel_choices")
    stopped = _early_stop_record(run_dir, best_metric, settings.early_stopping_patience)
    if chief and (stopped or start_step >= settings.train_steps):  # a run dir of an earlier version gets one
        _write_shortlist(run_dir, problem, settings.data_dir, vocabularies, parent)
    if stopped:
        logging.info("%s stopped early at step %d: no better dev %s in %d evaluations since step %d.",
                     run_dir.path, stopped["step"], stopped["metric"], stopped["patience"], stopped["best_step"])
        return {"step": start_step, "already_done": True, "early_stopped": stopped}
    if start_step >= settings.train_steps:
        logging.info("%s is at step %d >= --train_steps=%d: nothing to do.", run_dir.path, start_step, settings.train_steps)
        return {"step": start_step, "already_done": True}
    warm_start = None
    start_flag = "--warm_start_from" if settings.warm_start_from else "--branch_from" if settings.branch_from else None
    if start_flag and latest:
        logging.info("%s has checkpoints of its own: resuming at step %d; %s only starts new runs.",
                     run_dir.path, start_step, start_flag)
    elif parent:
        warm_start = parent[1]
    if latest:
        _explain_moved_cooldown(run_dir, hparams, start_step, settings.train_steps)
    best = None
    if chief:
        record = {"train_steps": settings.train_steps}
        if warm_start:
            record["warm_started_from"] = warm_start
        if branch:
            record["branched_from"] = branch[1]
        if structure_tokens is not None:  # so a restore needs no problem catalog
            record["structure_tokens"] = structure_tokens
        run_dir.write(hparams, problem, vocabularies, **record)
        _write_shortlist(run_dir, problem, settings.data_dir, vocabularies, parent or branch)
        if best_metric:
            best = BestCheckpoint(run_dir, best_metric, higher_is_better=best_metric != "loss")
            best.recover()

    with strategy.scope():
        model = factory.build_model(hparams, vocabularies, structure_tokens, dtype=hparams.mixed_precision)
        optimizer = make_optimizer(hparams, settings.train_steps)
        train_step = TrainStep(model, optimizer, hparams, strategy)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    kernels = kernel_choices.choose(model, hparams, settings.kernel_choices, kept_kernels)
    if hparams.mixed_precision == "mixed_bfloat16" and bfloat16_units() is None:
        logging.warning("mixed_bfloat16 on a machine without bfloat16 units (AVX512_BF16, AMX or a GPU): TensorFlow "
                        "emulates its bfloat16 products here, no faster than float32.")
    if chief:
        run_dir.write_run_info({**run_dir.run_info(), "kernel_choices": kernels})
    checkpoint_dir = run_dir.path if chief else tempfile.mkdtemp(prefix="t2t_keras_worker_ckpt_")
    manager = checkpoint_manager(checkpoint, checkpoint_dir, settings.keep_checkpoint_max)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Resuming from %s (step %d%s).", latest, start_step, _fingerprint(model, strategy))
    elif warm_start:
        tf.train.Checkpoint(model=model).restore(warm_start).expect_partial().assert_existing_objects_matched()
        latest = manager.save(checkpoint_number=0)  # so a kill before the first save resumes from these weights
        logging.info("Warm-started from %s: its weights, a fresh optimizer and schedule from step 0 (%s).",
                     warm_start, latest)
    elif branch:
        checkpoint.restore(branch[1]).assert_existing_objects_matched()
        latest = manager.save(checkpoint_number=start_step)  # this run's own first checkpoint: a kill resumes here
        logging.info("Branched from %s: its weights, optimizer state and step %d, on to step %d here (%s).",
                     branch[1], start_step, settings.train_steps, latest)

    # With a seed, the data order is a function of it, and a resumed run skips what was trained on.
    skip = start_step * hparams.gradient_accumulation_steps if settings.seed is not None else 0
    dataset = strategy.distribute_datasets_from_function(
        lambda context: problem.dataset(
            "train", settings.data_dir, hparams.tokens_per_batch, training=True, max_length=hparams.max_length,
            input_context=context, seed=settings.seed, subword_sampling=hparams.subword_sampling,
        ).skip(skip)
    )
    score_sentences = settings.eval_sentences if chief else 0
    shortlist = (load_run_shortlist(run_dir).limited(decode_hparams.shortlist, decode_hparams.shortlist_frequent)
                 if score_sentences and decode_hparams.shortlist else None)
    evaluator = (
        Evaluator(problem, settings.data_dir, model, vocabularies, hparams, strategy, settings.eval_steps,
                  score_sentences, decode_hparams, shortlist, selects_by_score=best_metric == problem.score_name)
        if settings.evaluate else None
    )
    writers = _summary_writers(run_dir.path, chief)
    recorder = _EvaluationRecorder(evaluator, writers["eval"], run_dir if chief else None, best, model,
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
            log = _TrainingLog(run_dir if chief else None, start_step, strategy.num_replicas_in_sync)
            dropout = ResidualDropoutSchedule(model, hparams)
            result = _loop(train_step, dropout, iter(dataset), manager, recorder, writers, settings, start_step,
                           run_dir, log, stops)
            if chief and evaluator is not None and score_sentences and settings.alpha_grid:
                result["alpha"] = _choose_alpha(evaluator, run_dir, settings.alpha_grid, result["step"])
            return result
    finally:
        if chief:
            run_dir.remove_incomplete_saves()  # of a save cut short (no space, a signal)
        else:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)


def _choose_alpha(evaluator, run_dir: RunDir, alphas, step: int) -> float:
    """The length-penalty alpha whose decoding of the dev sentences scores best (the smaller of
    equals), recorded in run.json as the run's decode default (and best/'s, if kept): the
    paper's 0.6 left a small model's outputs 9% short (README, "Two text files in"), which a
    user should not have to find out. --decode_hparams=alpha=... still overrides it."""
    scores = evaluator.scores_by_alpha(alphas)
    alpha = max(alphas, key=lambda a: (scores[a], -a))
    record = {"decode_defaults": {"alpha": alpha}, "alpha_choice": {
        "step": step, "sentences": len(evaluator.sources), "metric": evaluator.problem.score_name,
        "scores": {str(a): round(scores[a], 2) for a in alphas}}}
    for directory in (run_dir, RunDir(os.path.join(run_dir.path, BEST_DIR))):
        if directory.exists():
            directory.write_run_info({**directory.run_info(), **record})
    logging.info("Decoding default: alpha %g, whose dev %s was the best of %s.", alpha, evaluator.problem.score_name,
                 ", ".join(f"{a:g}: {scores[a]:.2f}" for a in alphas))
    return alpha


def _agreed_latest_checkpoint(strategy, run_dir: RunDir) -> str | None:
    """The latest intact checkpoint (a damaged newer one is passed over, in one line each), which
    every worker of a multi-worker job must see in the same output_dir (the chief's): a worker
    that sees another step (no shared folder) stops them all with one line, instead of resuming
    the chief alone."""
    latest, damaged = intact_checkpoints(run_dir)
    for path, reason in damaged:
        logging.warning("Checkpoint %s is damaged (%s): passed over%s.", path, reason,
                        f"; resuming from {latest}, the newest intact one" if latest else "")
    if damaged and latest is None:
        raise UsageError(f"no checkpoint of --output_dir={run_dir.path} is intact (the newest: {damaged[0][0]}, "
                         f"{damaged[0][1]}); copy them again, or --start_over.")
    if is_multi_worker(strategy):
        mine = tf.constant([checkpoint_step(latest) if latest else -1])
        everyone = strategy.gather(strategy.run(lambda: mine), axis=0).numpy()
        steps = [int(everyone.min()), int(everyone.max())]
        if steps[0] != steps[1]:
            seen = f"step {steps[0]}" if steps[0] >= 0 else "no checkpoint"
            raise UsageError(
                f"the workers disagree on --output_dir={run_dir.path}: one sees {seen}, another step {steps[1]}. "
                "Every worker must see the chief's checkpoints at that path: give them all one shared folder (a gs:// "
                "path or a network file system)."
            )
    return latest


def _fingerprint(model, strategy) -> str:
    """For a multi-worker job, a checksum of the restored weights: every worker logs the same one."""
    if not is_multi_worker(strategy):
        return ""
    total = sum(float(tf.reduce_sum(tf.cast(weight, tf.float64))) for weight in model.weights)
    return f"; weights checksum {total:.10e}"


def _write_shortlist(run_dir: RunDir, problem, data_dir: str, vocabularies, parent: tuple[RunDir, str] | None) -> None:
    """The run's lexical shortlist (the decode setting `shortlist`), counted once from the
    training pairs, and merged with the parent's when fine-tuning, so that what the parent
    learned to translate from its own, usually larger, corpus stays choosable (EXPERIMENTS.md,
    "Vocabulary shortlist")."""
    if files.isfile(run_dir.shortlist_path):
        return
    started = time.time()
    shortlist = Shortlist.from_data_dir(problem, data_dir, vocabularies)
    if parent and files.isfile(parent[0].shortlist_path):  # the parent's ids are ours (`_parent_run`)
        shortlist = shortlist.merged(load_run_shortlist(parent[0]))
    shortlist.save(run_dir.shortlist_path)
    logging.info("Wrote %s (%.0f s).", run_dir.shortlist_path, time.time() - started)


def _parent_run(path: str, flag: str, hparams: HParams, vocabularies, data_dir: str) -> tuple[RunDir, str]:
    """(run dir, checkpoint) that `flag` (--warm_start_from, --branch_from) names, after checking
    that its model has this run's architecture and vocabularies."""
    parent, checkpoint = resolve_checkpoint(path, flag)
    differences = parent.hparams().differences(hparams, group=MODEL)
    if differences:
        raise UsageError(
            f"{flag}={path} is a model with other architecture hparams ({'; '.join(differences)}); "
            f"{flag} needs the same architecture (dropout, learning rate and other training hparams may differ)."
        )
    difference = parent.vocabularies().difference(vocabularies)
    if difference:
        raise UsageError(
            f"{flag}={path}: {difference} is not the one in --data_dir={data_dir}; make the data with "
            f"t2t-keras-datagen --vocab_model={parent.path}."
        )
    return parent, checkpoint


def _branch_point(path: str, hparams: HParams, vocabularies, settings: RunSettings) -> tuple[RunDir, str]:
    """(run dir, checkpoint) that --branch_from names: a trainer checkpoint (weights and optimizer
    state) of this architecture and vocabulary, before --train_steps."""
    parent, checkpoint = _parent_run(path, "--branch_from", hparams, vocabularies, settings.data_dir)
    if not holds_training_state(parent, checkpoint):
        raise UsageError(
            f"--branch_from={path} holds model weights only (an average, best/ or a weights-only copy): branch from one of "
            f"the trainer's own checkpoints (DIR/ckpt-N), or start from these weights with --warm_start_from."
        )
    step = checkpoint_step(checkpoint)
    if step >= settings.train_steps:
        raise UsageError(f"--branch_from={path} is at step {step}: give a --train_steps above it (now {settings.train_steps}).")
    return parent, checkpoint


def _explain_moved_cooldown(run_dir: RunDir, hparams: HParams, start_step: int, train_steps: int) -> None:
    """One line when a resumed run with a learning-rate cooldown gets another --train_steps:
    the cooldown moves with it, so the rate may be near 0, or jump back up."""
    previous = run_dir.run_info().get("train_steps")
    if not hparams.learning_rate_cooldown_steps or previous in (None, train_steps):
        return
    schedule = make_schedule(hparams, train_steps)
    rate = float(schedule(start_step))
    peak = float(make_schedule(dataclasses.replace(hparams, learning_rate_cooldown_steps=0))(hparams.learning_rate_warmup_steps - 1))
    logging.info(
        "The learning rate cools down to 0 over the last %d steps before --train_steps (was %d, now %d): from step %d "
        "it is %.3g (%.0f%% of the peak %.3g). To train on with a fresh schedule, use --warm_start_from=%s and a new "
        "--output_dir.",
        hparams.learning_rate_cooldown_steps, previous, train_steps, start_step, rate, 100 * rate / peak, peak,
        run_dir.path,
    )


def _best_metric(settings: RunSettings, score_name: str, run_dir: RunDir) -> str | None:
    """The metric that picks the best checkpoint, or None; a UsageError for an impossible choice.

    "auto" keeps the metric a resumed run's best/ was chosen by, when this run computes it."""
    choice = settings.keep_best
    if choice not in (*KEEP_BEST_CHOICES, score_name):
        raise UsageError(f"--keep_best={choice}: use one of {', '.join((*KEEP_BEST_CHOICES, score_name))}.")
    metric = None
    if choice == "auto" and settings.evaluate:
        metric = score_name if settings.eval_sentences else "loss"
        recorded = BestCheckpoint.recorded_metric(run_dir)
        if recorded == score_name and not settings.eval_sentences:
            logging.info("%s/best is kept by dev %s, which --eval_sentences=0 does not compute: no new best this run.",
                         run_dir.path, recorded)
            metric = None
        elif recorded:
            metric = recorded
    elif choice not in ("auto", "none") and settings.evaluate:
        if choice == score_name and not settings.eval_sentences:
            raise UsageError(f"--keep_best={score_name} needs the dev {score_name}: set --eval_sentences to a positive number.")
        metric = choice
    if settings.early_stopping_patience and not metric:
        raise UsageError(
            "--early_stopping_patience needs a dev metric to watch: --evaluate with --keep_best=loss, or with "
            f"--eval_sentences > 0 and --keep_best={score_name} (or auto)."
        )
    return metric


def _early_stop_record(run_dir: RunDir, metric: str | None, patience: int) -> dict | None:
    """{"step", "best_step", "metric", "patience"} if the evaluations run.json holds already
    went `patience` times without beating the best; else None."""
    if not patience or not metric or not run_dir.exists():
        return None
    info = run_dir.run_info()
    best = info.get("best")
    if not best or best.get("metric") != metric:
        return None
    since = [e["step"] for e in info.get("evaluations", []) if e["step"] > best["step"]]
    if len(since) < patience:
        return None
    return {"step": since[patience - 1], "best_step": best["step"], "metric": metric, "patience": patience}


def _check_restart(run_dir, hparams, problem, vocabularies, settings, chief) -> None:
    """Refuses to continue an output_dir holding another architecture, problem or vocabulary."""
    if not run_dir.exists():
        return
    if settings.start_over:
        if chief:
            run_dir.clear()
        return
    if run_dir.run_info().get("weights_only"):  # before any other word about it
        _refuse_weights_only(run_dir)
    previous = run_dir.hparams()
    differences = previous.differences(hparams, group=MODEL)
    if differences:
        raise UsageError(
            f"--output_dir={run_dir.path} holds a model with other architecture hparams ({'; '.join(differences)}); "
            "use another --output_dir, or --start_over to delete its checkpoints."
        )
    info = run_dir.run_info()
    if info["problem"] != problem.name:
        raise UsageError(
            f"--output_dir={run_dir.path} was trained on {info['problem']}, not {problem.name}; "
            "use another --output_dir or --start_over."
        )
    difference = run_dir.vocabularies().difference(vocabularies)
    if difference:
        raise UsageError(
            f"--output_dir={run_dir.path} holds a model trained with another vocabulary: {difference} is not the one in "
            f"--data_dir={settings.data_dir}; use the original data_dir, or --start_over."
        )
    for line in previous.differences(hparams):
        logging.info("Training hparam changed since the last run: %s", line)


def _refuse_weights_only(run_dir: RunDir) -> None:
    raise UsageError(
        f"--output_dir={run_dir.path} holds model weights only (an averaged or best checkpoint, no optimizer state "
        f"to resume); to train from them, use --warm_start_from={run_dir.path} with a new --output_dir."
    )


def _summary_writers(output_dir, chief):
    if not chief:
        return {"train": tf.summary.create_noop_writer(), "eval": tf.summary.create_noop_writer()}
    return {name: tf.summary.create_file_writer(os.path.join(output_dir, name)) for name in ("train", "eval")}


class _EvaluationRecorder:
    """Evaluates a saved step, logs it, offers it as the best checkpoint, records it in
    run.json and says whether to stop early."""

    def __init__(self, evaluator, writer, run_dir, best, model, patience=0):
        self.evaluator, self.writer, self.run_dir, self.best, self.model = evaluator, writer, run_dir, best, model
        self.patience = patience
        self.stopped = None  # the early-stopping record, once it applies

    def evaluate(self, step: int) -> dict:
        metrics = self.evaluator.evaluate()
        logging.info("eval at step %d: %s", step, "  ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        with self.writer.as_default(step=step):
            for name, value in metrics.items():
                tf.summary.scalar(name, value)
        if self.best is not None and self.best.offer(self.model, step, metrics[self.best.metric]):
            logging.info("New best checkpoint by dev %s: step %d (%.4g).", self.best.metric, step, metrics[self.best.metric])
        if self.run_dir is not None:
            info = self.run_dir.run_info()
            evaluations = [e for e in info.get("evaluations", []) if e["step"] != step]
            info["evaluations"] = sorted(evaluations + [{"step": step, **metrics}], key=lambda e: e["step"])
            if self.best is not None:
                info["best"] = self.best.record()
            self.run_dir.write_run_info(info)
            if self.best is not None:
                self.stopped = _early_stop_record(self.run_dir, self.best.metric, self.patience)
        return metrics


def _loop(train_step, dropout, iterator, manager, recorder, writers, settings, start_step, run_dir, log, stops) -> dict:
    optimizer = train_step.optimizer
    step, last_saved, loss = start_step, manager.latest_checkpoint, float("nan")
    window = _Window(start_step)
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
                stats["tokens_per_s"], _duration(eta),
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


class _TrainingLog:
    """This invocation's part of the run in run.json's "training" list, rewritten at every
    checkpoint: steps (from, to), wall seconds since the invocation began training, target tokens
    (R-Drop's counted twice: they were computed twice), replicas and the chief's CPU. A run resumed on
    other machines thereby states its compute (steps x tokens) and where its time went; what a
    kill loses after the last checkpoint is neither kept nor recorded."""

    def __init__(self, run_dir, start_step: int, replicas: int):
        self.run_dir = run_dir  # None but on the chief
        self.entry = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "from_step": start_step,
                      "replicas": replicas, "cpu": cpu_model()}
        self.started = time.perf_counter()
        self.tokens = 0.0
        self.index = None  # of this invocation's entry, once written

    def add(self, tokens: float) -> None:
        self.tokens += tokens

    def record(self, step: int) -> None:
        if self.run_dir is None:
            return
        info = self.run_dir.run_info()
        entries = info.get("training", [])
        entry = {**self.entry, "to_step": step, "seconds": round(time.perf_counter() - self.started, 1),
                 "target_tokens": int(self.tokens)}
        if self.index is None:
            self.index = len(entries)
            entries.append(entry)
        else:
            entries[self.index] = entry
        self.run_dir.write_run_info({**info, "training": entries})


class _Window:
    """Loss, steps/s and tokens/s since the last progress line."""

    def __init__(self, step):
        self.start_time, self.start_step = time.perf_counter(), step
        self.losses, self.tokens = [], 0.0

    def add(self, loss, tokens):
        self.losses.append(loss)
        self.tokens += tokens

    def flush(self, step) -> dict:
        seconds = max(time.perf_counter() - self.start_time, 1e-9)
        stats = {
            "loss": sum(self.losses) / max(len(self.losses), 1),
            "steps_per_s": (step - self.start_step) / seconds,
            "tokens_per_s": self.tokens / seconds,
        }
        self.__init__(step)
        return stats


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"

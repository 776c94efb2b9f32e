"""A training run resolved before it starts, as the decoder's `TrainedRun` is: the run
settings (flags), every check that can fail before training (a writable output_dir, the data,
the same architecture, problem and vocabulary as the checkpoints already there, steps left to
do, the parent of a warm start or branch), the checkpoint it resumes from (the newest intact
one: a damaged newer one, an interrupted copy's, is passed over in one line), and the records
it writes before the first step (hparams.json, run.json, the vocabularies, the shortlist).

    plan = RunPlan.resolve(problem, hparams, RunSettings(output_dir=..., ...), strategy)
    plan.done             # the result already, when nothing is left to do
    best = plan.write_records()
"""

from __future__ import annotations

import dataclasses
import time

import tensorflow as tf
from absl import logging

from t2t_keras import files
from t2t_keras.checkpoints import (
    BestCheckpoint, CheckpointRef, RunDir, checkpoint_step, holds_training_state, intact_checkpoints, resolve_checkpoint,
)
from t2t_keras.decoding.shortlist import Shortlist, load_run_shortlist
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import MODEL, DecodeHParams, HParams
from t2t_keras.models import factory
from t2t_keras.training.distribution import is_chief, is_multi_worker
from t2t_keras.training.records import early_stop_record

KEEP_BEST_CHOICES = ("auto", "none", "loss")  # or the problem's score_name


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
    # With warm_start_from: the data dir's vocabulary may differ from the parent's; the pieces
    # both have keep the parent's embeddings, new ones start as the paper initialises them
    # (training/vocabulary_update.py).
    update_vocabulary: bool = False
    new_pieces: str = "paper"  # how an updated vocabulary's new pieces start: vocabulary_update.NEW_PIECES
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
    # At the end of training (with eval_sentences > 0), the first alpha_sentences dev sentences
    # (0: the eval_sentences ones) are decoded with each of these length-penalty alphas and the
    # best becomes the run's decode default (run.json); () = none (the trainer command's
    # --alpha_grid gives five, on 1000 sentences: 100 chose by chance, docs/results/demo.md).
    alpha_grid: tuple = ()
    alpha_sentences: int = 0

@dataclasses.dataclass
class RunPlan:
    """What `train` does, decided before it builds a model (`resolve`)."""

    problem: object
    hparams: HParams
    settings: RunSettings
    run_dir: RunDir
    chief: bool
    vocabularies: object
    structure_tokens: list | None  # the problem's, for copy_position_encoding
    decode_hparams: DecodeHParams  # of the evaluations' dev decoding
    best_metric: str | None  # what picks output_dir/best
    resume_from: str | None  # this run's own checkpoint to go on from
    start_step: int
    previous_train_steps: int | None  # the --train_steps of the run this one resumes, as recorded
    kept_kernels: dict | None  # the kernel choices of the run's first start (run.json), kept through resumes
    warm_start: str | None  # a parent's checkpoint whose weights start this run at step 0
    branch_from: str | None  # another run's checkpoint whose whole training state this run goes on from
    parent: CheckpointRef | None  # the warm start's or branch's checkpoint, whose run's shortlist joins this run's
    done: dict | None  # train's result already, when nothing is left to do

    @classmethod
    def resolve(cls, problem, hparams: HParams, settings: RunSettings, strategy: tf.distribute.Strategy) -> "RunPlan":
        """Every check before training, in the order a user meets them; a UsageError names the fix."""
        if settings.update_vocabulary and not settings.warm_start_from:
            raise UsageError("--update_vocabulary updates a warm start's vocabulary: give --warm_start_from=PARENT too.")
        if settings.warm_start_from and settings.branch_from:
            raise UsageError(
                "--warm_start_from and --branch_from both start a run from another one: give one (--warm_start_from takes "
                "its weights to step 0 with a fresh optimizer; --branch_from its whole training state at its step)."
            )
        chief = is_chief(strategy)
        run_dir = RunDir.for_writing(settings.output_dir) if chief else RunDir(settings.output_dir)
        problem.configure_from_data_dir(settings.data_dir)  # a UsageError if datagen did not run
        vocabularies = problem.load_vocabularies(settings.data_dir)
        if hparams.guided_alignment_weight:
            problem.check_alignments(settings.data_dir)
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
        recorded = run_dir.run_info() if latest and files.isfile(run_dir.run_path) else {}
        kept_kernels, previous_train_steps = recorded.get("kernel_choices"), recorded.get("train_steps")
        # The parent run, resolved and checked once: its weights start a new run, and its shortlist
        # joins this one's (a resumed run has both already, unless its run dir predates shortlists).
        parent = None
        if settings.warm_start_from and (not latest or not files.isfile(run_dir.shortlist_path)):
            parent = _parent_run(settings.warm_start_from, "--warm_start_from", hparams, vocabularies, settings)
        branch = None
        if settings.branch_from and not latest:
            branch = parent = _parent_run(settings.branch_from, "--branch_from", hparams, vocabularies, settings)
            start_step, kept_kernels = branch.step, branch.run_info.get("kernel_choices")
        plan = cls(problem, hparams, settings, run_dir, chief, vocabularies, structure_tokens, decode_hparams, best_metric,
                   latest, start_step, previous_train_steps, kept_kernels, None, branch.path if branch else None, parent,
                   None)
        plan.done = plan._nothing_to_do()
        if plan.done:
            return plan
        start_flag = "--warm_start_from" if settings.warm_start_from else "--branch_from" if settings.branch_from else None
        if start_flag and latest:
            logging.info("%s has checkpoints of its own: resuming at step %d; %s only starts new runs.",
                         run_dir.path, start_step, start_flag)
        elif parent and not branch:
            plan.warm_start = parent.path
        return plan

    @property
    def updates_vocabulary(self) -> bool:
        """Whether the warm start maps the parent's weights into another vocabulary."""
        return bool(self.warm_start and self.parent.run_dir.vocabularies().difference(self.vocabularies))

    def _nothing_to_do(self) -> dict | None:
        """train's result when the run is finished already (stopped early, or at its steps)."""
        stopped = early_stop_record(self.run_dir, self.best_metric, self.settings.early_stopping_patience)
        if self.chief and (stopped or self.start_step >= self.settings.train_steps):  # a run dir of an earlier version gets one
            _write_shortlist(self.run_dir, self.problem, self.settings.data_dir, self.vocabularies, self.parent)
        if stopped:
            logging.info("%s stopped early at step %d: no better dev %s in %d evaluations since step %d.",
                         self.run_dir.path, stopped["step"], stopped["metric"], stopped["patience"], stopped["best_step"])
            return {"step": self.start_step, "already_done": True, "early_stopped": stopped}
        if self.start_step >= self.settings.train_steps and self._last_records_missing():
            logging.info("%s is at step %d, whose evaluation or choice of alpha a stop cut short: doing it now.",
                         self.run_dir.path, self.start_step)
            return None
        if self.start_step >= self.settings.train_steps:
            logging.info("%s is at step %d >= --train_steps=%d: nothing to do.", self.run_dir.path, self.start_step,
                         self.settings.train_steps)
            return {"step": self.start_step, "already_done": True}
        return None

    def _last_records_missing(self) -> bool:
        """Whether the chief's last step lacks its evaluation or its choice of alpha (a signal
        during them stops the trainer without them)."""
        settings = self.settings
        if not (self.chief and settings.evaluate and self.resume_from and files.isfile(self.run_dir.run_path)):
            return False
        info = self.run_dir.run_info()
        evaluated = any(e["step"] == self.start_step for e in info.get("evaluations", []))
        alpha_chosen = not (settings.eval_sentences and settings.alpha_grid) or (
            info.get("alpha_choice") or {}).get("step") == self.start_step
        return not (evaluated and alpha_chosen)

    def write_records(self) -> BestCheckpoint | None:
        """The chief's records before the first step: hparams.json, run.json, the vocabularies,
        the shortlist; and output_dir/best's keeper (a swap a kill cut repaired), if one is kept."""
        if not self.chief:
            return None
        record = {"train_steps": self.settings.train_steps}
        if self.warm_start:
            record["warm_started_from"] = self.warm_start
        if self.updates_vocabulary:
            record["vocabulary_updated_from"] = {side: getattr(self.parent.run_dir.vocabularies(), side).sha256
                                                 for side in ("source", "target")}
        if self.branch_from:
            record["branched_from"] = self.branch_from
        if self.structure_tokens is not None:  # so a restore needs no problem catalog
            record["structure_tokens"] = self.structure_tokens
        self.run_dir.write(self.hparams, self.problem, self.vocabularies, **record)
        _write_shortlist(self.run_dir, self.problem, self.settings.data_dir, self.vocabularies, self.parent)
        if not self.best_metric:
            return None
        best = BestCheckpoint(self.run_dir, self.best_metric, higher_is_better=self.best_metric != "loss")
        best.recover()
        return best


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


def _write_shortlist(run_dir: RunDir, problem, data_dir: str, vocabularies, parent: CheckpointRef | None) -> None:
    """The run's lexical shortlist (the decode setting `shortlist`), counted once from the
    training pairs, and merged with the parent's when fine-tuning, so that what the parent
    learned to translate from its own, usually larger, corpus stays choosable (docs/results/decoding_speed.md,
    "Shortlist")."""
    if files.isfile(run_dir.shortlist_path):
        return
    started = time.time()
    shortlist = Shortlist.from_data_dir(problem, data_dir, vocabularies)
    if parent and files.isfile(parent.run_dir.shortlist_path) and not parent.run_dir.vocabularies().difference(vocabularies):
        shortlist = shortlist.merged(load_run_shortlist(parent.run_dir))
    shortlist.save(run_dir.shortlist_path)
    logging.info("Wrote %s (%.0f s).", run_dir.shortlist_path, time.time() - started)


def _parent_run(path: str, flag: str, hparams: HParams, vocabularies, settings: RunSettings) -> CheckpointRef:
    """The checkpoint that `flag` (--warm_start_from, --branch_from) names, after checking that its
    model has this run's architecture and vocabularies; a branch's must also be a trainer
    checkpoint (weights and optimizer state) before --train_steps."""
    parent = resolve_checkpoint(path, flag)
    run_dir, _, step, holds_training_state, _ = parent
    differences = run_dir.hparams().differences(hparams, group=MODEL)
    if differences:
        raise UsageError(
            f"{flag}={path} is a model with other architecture hparams ({'; '.join(differences)}); "
            f"{flag} needs the same architecture (dropout, learning rate and other training hparams may differ)."
        )
    difference = run_dir.vocabularies().difference(vocabularies)
    if difference and not (settings.update_vocabulary and flag == "--warm_start_from"):
        update = " or add --update_vocabulary to start from its weights in this vocabulary" if flag == "--warm_start_from" else ""
        raise UsageError(
            f"{flag}={path}: {difference} is not the one in --data_dir={settings.data_dir}; make the data with "
            f"t2t-keras-datagen --vocab_model={run_dir.path}{update}."
        )
    if flag != "--branch_from":
        return parent
    if not holds_training_state or step is None:
        raise UsageError(
            f"--branch_from={path} holds model weights only (an average, best/ or a weights-only copy): branch from one of "
            f"the trainer's own checkpoints (DIR/ckpt-N), or start from these weights with --warm_start_from."
        )
    if step >= settings.train_steps:
        raise UsageError(f"--branch_from={path} is at step {step}: give a --train_steps above it (now {settings.train_steps}).")
    return parent


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

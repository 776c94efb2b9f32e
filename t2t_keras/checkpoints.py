"""Run directories and their checkpoints: everything that writes, finds or restores weights.

    output_dir/
      hparams.json        the resolved HParams of the latest run
      run.json            problem, vocabularies, every evaluation, and the best checkpoint's record
      vocab.spm.model     a copy of the vocabulary (the directory is self-contained): the shared
                          one, or the source's beside target.spm.model
      checkpoint, ckpt-<step>.index, ckpt-<step>.data-*   tf.train.Checkpoint files
      best/               the best checkpoint by a dev metric: a run directory of its own
      train/, eval/       TensorBoard event files

An averaged or best checkpoint is written as a run directory of its own (the same records,
one checkpoint of model weights), so the decoder, the exporter and the Python API take it
like any other. Such a directory appears complete or not at all (`files.atomic_path`).
The trainer, the decoder, the exporter and the averager all come here; nothing here
depends on training.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

import numpy as np
from absl import logging

from t2t_keras import files, registry
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import HParams

CHECKPOINT_PREFIX = "ckpt"
BEST_DIR = "best"
SHORTLIST_FILE = "shortlist.npz"
# The records of a run beside its checkpoints, all written by the trainer; averaged and best
# directories get copies of all but run.json (each writes its own).
RECORD_FILES = ("hparams.json", "run.json", "vocab.spm.model", "target.spm.model", SHORTLIST_FILE)
# Everything else the trainer writes into its output_dir.
TRAINING_OUTPUTS = ("checkpoint", "train", "eval", BEST_DIR)
# What a checkpoint save cut short (no space, a kill) leaves under TensorFlow's temporary names,
# which TensorFlow never removes: the folder of the new checkpoint's parts, the state file's new version.
INCOMPLETE_SAVE = re.compile(rf"{CHECKPOINT_PREFIX}-\d+_temp|checkpoint\.tmp[0-9a-f]{{32}}")


class RunDir:
    """Reads and writes the files of one output_dir."""

    def __init__(self, path: str):
        # Absolute, so the checkpoint state file never records paths relative to the cwd.
        self.path = files.absolute(path)

    @property
    def hparams_path(self) -> str:
        return os.path.join(self.path, "hparams.json")

    @property
    def run_path(self) -> str:
        return os.path.join(self.path, "run.json")

    @property
    def vocab_path(self) -> str:
        """The shared vocabulary, or the source's."""
        return os.path.join(self.path, "vocab.spm.model")

    @property
    def target_vocab_path(self) -> str:
        """The target's vocabulary, present only when it is not shared."""
        return os.path.join(self.path, "target.spm.model")

    @property
    def shortlist_path(self) -> str:
        """The lexical shortlist of the run's training pairs, written by the trainer and read by
        decoding (`decoding.shortlist.load_run_shortlist`)."""
        return os.path.join(self.path, SHORTLIST_FILE)

    @classmethod
    def for_writing(cls, path: str) -> "RunDir":
        """The run directory at `path`, created (a UsageError naming --output_dir when no file can
        be written there), and rid of what checkpoint saves cut short left in it, before
        training needs their space."""
        run_dir = cls(path)
        files.ensure_writable_dir(run_dir.path, "--output_dir")
        removed = files.remove_matching(run_dir.path, INCOMPLETE_SAVE)
        if removed:
            logging.info("Removed what checkpoint saves cut short left in %s: %s.", run_dir.path, ", ".join(removed))
        return run_dir

    def write(self, hparams: HParams, problem, vocabularies, **record) -> None:
        """Records what a model in this directory is (atomically, file by file): hparams, the
        problem and its settings, the vocabularies, and `record` (e.g. train_steps), keeping
        the evaluations and best-checkpoint record of earlier runs."""
        files.write_atomically(self.hparams_path, hparams.to_json())
        previous = self.run_info() if files.isfile(self.run_path) else {}
        source, target = vocabularies
        info = {key: value for key, value in previous.items() if not key.startswith("target_vocab_")}
        info.pop("problem_settings", None)
        info.update(problem=problem.name, vocab_sha256=source.sha256, vocab_pieces_sha256=source.pieces_sha256,
                    vocab_size=source.size, **record)
        if problem.settings:
            info["problem_settings"] = problem.settings
        if not vocabularies.shared:
            info.update(target_vocab_sha256=target.sha256, target_vocab_pieces_sha256=target.pieces_sha256,
                        target_vocab_size=target.size)
        self.write_run_info(info)
        files.write_atomically(self.vocab_path, source.model_proto)
        if vocabularies.shared:
            files.remove(self.target_vocab_path)
        else:
            files.write_atomically(self.target_vocab_path, target.model_proto)

    def write_run_info(self, info: dict) -> None:
        files.write_atomically(self.run_path, json.dumps(info, indent=2, sort_keys=True) + "\n")

    def exists(self) -> bool:
        return files.isfile(self.hparams_path)

    def hparams(self) -> HParams:
        if not files.isfile(self.hparams_path):
            raise UsageError(
                f"{self.hparams_path} is missing: --output_dir must be a directory t2t-keras-trainer wrote."
            )
        return HParams.from_json(files.read_text(self.hparams_path), self.hparams_path)

    def run_info(self) -> dict:
        if not files.isfile(self.run_path):
            raise UsageError(f"{self.run_path} is missing: --output_dir must be a directory t2t-keras-trainer wrote.")
        return files.read_json(self.run_path, self._run_info_recovery())

    def _run_info_recovery(self) -> str:
        best = os.path.join(self.path, BEST_DIR, "run.json")
        if os.path.basename(os.path.normpath(self.path)) != BEST_DIR and files.isfile(best):
            return (f"its checkpoints are intact: restore it from a backup, or copy {best} (the record as of the best "
                    "checkpoint's evaluation) over it.")
        return "its checkpoints are intact: restore it from a backup, or train again into a new --output_dir."

    def problem(self):
        """The registered problem this directory's model was trained on, with the settings
        it was trained with (translate_text's)."""
        info = self.run_info()
        return registry.problem(info["problem"]).configure(info.get("problem_settings", {}))

    def vocabularies(self):
        """The `Vocabularies` (source, target) the model was trained with, checked against what
        run.json recorded of them (a swapped file is one line, not garbage decoded)."""
        from t2t_keras.data.tokenizers import Vocabularies, Vocabulary

        if not files.isfile(self.vocab_path):
            raise UsageError(f"{self.vocab_path} is missing: --output_dir must be a directory t2t-keras-trainer wrote.")
        source = Vocabulary.load(self.vocab_path)
        separate = files.isfile(self.target_vocab_path)
        target = Vocabulary.load(self.target_vocab_path) if separate else source
        if files.isfile(self.run_path):
            record = self.run_info()
            source.check_against(record, "vocab_", self.run_path)
            if separate:
                target.check_against(record, "target_vocab_", self.run_path)
        return Vocabularies(source, target)

    def checkpoints(self) -> list[str]:
        """Checkpoint paths, oldest first (as the checkpoint state file lists them)."""
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(self.path)
        if state is None:
            return []
        # Checkpoints live in this directory whatever path the state file recorded (a run
        # started with a relative --output_dir recorded paths relative to its cwd).
        return [os.path.join(self.path, os.path.basename(p)) for p in state.all_model_checkpoint_paths]

    def latest_checkpoint(self) -> str | None:
        paths = self.checkpoints()
        return paths[-1] if paths else None

    def require_checkpoint(self, checkpoint_path: str | None = None) -> str:
        """`checkpoint_path`, or the latest checkpoint; a UsageError if there is none."""
        if checkpoint_path:
            if not files.exists(checkpoint_path + ".index"):
                raise UsageError(f"--checkpoint_path={checkpoint_path}: no such checkpoint (no {checkpoint_path}.index).")
            return checkpoint_path
        latest = self.latest_checkpoint()
        if latest is None:
            raise UsageError(f"--output_dir={self.path} has no checkpoint yet; train first (t2t-keras-trainer).")
        return latest

    def clear(self) -> None:
        """Removes everything the trainer wrote (for --start_over): records, the shortlist
        (another data_dir's would list another corpus's tokens), checkpoints, events, best/."""
        for name in files.listdir(self.path):
            if name in (*RECORD_FILES, *TRAINING_OUTPUTS) or name.startswith(CHECKPOINT_PREFIX + "-"):
                files.remove(os.path.join(self.path, name))

    def remove_incomplete_saves(self) -> list[str]:
        """Deletes what checkpoint saves cut short left here (`INCOMPLETE_SAVE`: TensorFlow leaves
        it, and the parts' folder may be as large as a checkpoint); returns the names removed."""
        return files.remove_matching(self.path, INCOMPLETE_SAVE)


def damage(checkpoint_path: str) -> str | None:
    """Why the checkpoint cannot be restored, in a few words naming its file (a missing or
    truncated file, a failed checksum: an interrupted copy or write), or None when every
    tensor in it reads back whole. Reads the whole checkpoint. Local files only: on other
    filesystems (ram://, where TensorFlow's reader takes a checkpoint's prefix for a directory,
    gs://) restoring is the check, and None is returned."""
    import tensorflow as tf

    if not files.is_local(checkpoint_path):
        return None
    try:
        reader = tf.train.load_checkpoint(checkpoint_path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError, OSError) as e:
        reason = (getattr(e, "message", None) or str(e) or type(e).__name__).strip().splitlines()[0]
        data_files = files.glob(checkpoint_path + ".data-*")
        named = os.path.basename(data_files[0]) if len(data_files) == 1 else os.path.basename(checkpoint_path) + ".*"
        return f"{named}: {reason}"
    return None


def intact_checkpoints(run_dir: RunDir) -> tuple[str | None, list[tuple[str, str]]]:
    """(The newest checkpoint of `run_dir` that reads back whole or None, [(newer checkpoint, its
    `damage`)]): where a run goes on after an interrupted copy or write damaged its latest."""
    damaged = []
    for path in reversed(run_dir.checkpoints()):
        reason = damage(path)
        if reason is None:
            return path, damaged
        damaged.append((path, reason))
    return None, damaged


def damaged_checkpoint_error(run_dir: RunDir, checkpoint_path: str, reason: str) -> UsageError:
    """The one line for a command that cannot restore `checkpoint_path`: what is wrong, and the
    intact checkpoint to use instead."""
    intact, _ = intact_checkpoints(run_dir)
    fix = (f"the newest intact one is {intact}: pass --checkpoint_path={intact}" if intact
           else f"no checkpoint of {run_dir.path} is intact: copy it again or train again")
    return UsageError(f"checkpoint {checkpoint_path} is damaged ({reason}); {fix}.")


def holds_training_state(run_dir: RunDir, checkpoint_path: str) -> bool:
    """Whether a checkpoint has the optimizer's state: the trainer's do; averaged and best
    directories, whose run.json says "weights_only", do not (a local one made before that
    record existed is told by its variables)."""
    if run_dir.run_info().get("weights_only"):
        return False
    if files.is_local(checkpoint_path):
        import tensorflow as tf

        return any(name.startswith("optimizer/") for name, _ in tf.train.list_variables(checkpoint_path))
    return True


class CheckpointRef(NamedTuple):
    """A checkpoint that a flag named, resolved: its run directory, path and step, whether it holds
    the optimizer's state (`holds_training_state`), and its run's record."""

    run_dir: RunDir
    path: str
    step: int | None  # None for a name that is not ckpt-<step>
    holds_training_state: bool
    run_info: dict  # its run's run.json


def resolve_checkpoint(path: str, flag: str) -> CheckpointRef:
    """The checkpoint named by a run dir (its latest checkpoint) or by a checkpoint path such as
    DIR/ckpt-1200; a UsageError naming `flag` otherwise."""
    expanded = files.absolute(path)
    if files.isdir(expanded):
        run_dir = RunDir(expanded)
        if not run_dir.exists():
            raise UsageError(f"{flag}={path} is not a directory t2t-keras-trainer wrote (no hparams.json).")
        checkpoint = run_dir.latest_checkpoint()
        if checkpoint is None:
            raise UsageError(f"{flag}={path} has no checkpoint.")
    elif files.exists(expanded + ".index"):
        run_dir, checkpoint = RunDir(os.path.dirname(expanded)), expanded
        if not run_dir.exists():
            raise UsageError(f"{flag}={path}: {run_dir.path} is not a directory t2t-keras-trainer wrote (no hparams.json).")
    else:
        raise UsageError(f"{flag}={path}: no such run dir or checkpoint (a checkpoint is named like DIR/ckpt-1200).")
    step = re.search(rf"{CHECKPOINT_PREFIX}-(\d+)$", checkpoint)
    return CheckpointRef(run_dir, checkpoint, int(step.group(1)) if step else None,
                         holds_training_state(run_dir, checkpoint), run_dir.run_info())


def checkpoint_step(path: str) -> int:
    """The global step in a checkpoint name: .../ckpt-1200 -> 1200."""
    match = re.search(rf"{CHECKPOINT_PREFIX}-(\d+)$", path)
    if not match:
        raise ValueError(f"{path}: not a t2t-keras checkpoint name ({CHECKPOINT_PREFIX}-<step>).")
    return int(match.group(1))


def checkpoint_manager(checkpoint: tf.train.Checkpoint, directory: str, max_to_keep: int | None) -> tf.train.CheckpointManager:
    """The manager of `ckpt-<step>` files in `directory`. It writes the state file after the
    data, so a kill during a save leaves the previous checkpoint as the latest."""
    import tensorflow as tf

    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_PREFIX)


def build_model(run_dir: RunDir, dtype=None):
    """The model an output_dir describes (hparams.json + vocabularies), with fresh weights."""
    from t2t_keras.models import factory

    hparams = run_dir.hparams()
    vocabularies = run_dir.vocabularies()
    structure_tokens = run_dir.run_info().get("structure_tokens")  # recorded by the trainer
    if hparams.copy_position_encoding and structure_tokens is None:  # a run dir of an older version: ask the problem
        structure_tokens = factory.structure_tokens(hparams, run_dir.problem(), vocabularies)
    return factory.build_model(hparams, vocabularies, structure_tokens, dtype=dtype)


def restore_model(run_dir: RunDir, checkpoint_path: str | None = None, precision: str = "fp32"):
    """(The model of `run_dir` with the weights of `checkpoint_path` (default: the latest), that
    path); with precision "bf16", the model in bfloat16 (`factory.in_precision`)."""
    import tensorflow as tf

    from t2t_keras.models import factory

    path = run_dir.require_checkpoint(checkpoint_path)
    model = build_model(run_dir, dtype="float32")  # as checkpoints hold the weights, whatever the global policy
    try:
        tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
    except Exception:
        reason = damage(path)
        if reason is None:
            raise
        raise damaged_checkpoint_error(run_dir, path, reason) from None
    return factory.in_precision(model, precision), path


def write_weights_run_dir(source: RunDir, model, step: int, target_path: str, record: dict | None = None) -> str:
    """Writes `model`'s weights as a run directory of their own at `target_path`, beside
    copies of `source`'s records (run.json gains `record`); returns the checkpoint's path.

    The directory is built under a temporary name and swapped in whole, so `target_path`
    always holds a complete earlier version or the new one.
    """
    import tensorflow as tf

    with files.atomic_path(target_path) as temporary:
        files.makedirs(temporary)
        for name in RECORD_FILES:
            if name != "run.json" and files.isfile(os.path.join(source.path, name)):
                files.copy_atomically(os.path.join(source.path, name), os.path.join(temporary, name))
        info = {key: value for key, value in source.run_info().items() if key not in ("evaluations", "best")}
        RunDir(temporary).write_run_info({**info, **(record or {}), "weights_only": True})
        saved = checkpoint_manager(tf.train.Checkpoint(model=model), temporary, max_to_keep=None).save(checkpoint_number=step)
    return os.path.join(target_path, os.path.basename(saved))


def average_checkpoints(output_dir: str, num_last: int, avg_dir: str) -> str:
    """Writes the element-wise mean of the model weights of the last `num_last` checkpoints.

    `avg_dir` becomes an output_dir of its own (see `write_weights_run_dir`), its checkpoint
    named after the newest averaged step. Returns the new checkpoint's path.
    """
    import tensorflow as tf

    source = RunDir(output_dir)
    paths = source.checkpoints()
    if not paths:
        raise UsageError(f"--output_dir={output_dir} has no checkpoint to average; train first.")
    if num_last < 1:
        raise UsageError("--num_last_checkpoints must be at least 1.")
    target = RunDir(avg_dir)
    if target.path == source.path:
        raise UsageError("--avg_dir must differ from --output_dir (the average would join the checkpoints it averages).")
    if files.isdir(target.path) and files.listdir(target.path) and not target.exists():
        raise UsageError(f"--avg_dir={avg_dir} holds files that are not a t2t-keras run; pick a new or empty directory.")
    if target.exists() and "averaged" not in target.run_info():  # only an earlier average is replaced
        raise UsageError(f"--avg_dir={avg_dir} holds a run that is not an average (a trainer's, or a best/ directory); "
                         "it is never replaced: pick a new or empty directory.")
    files.ensure_writable_dir(os.path.dirname(target.path), "--avg_dir")
    paths = paths[-num_last:]
    model = build_model(source)
    checkpoint = tf.train.Checkpoint(model=model)
    sums = [np.zeros(w.shape, np.float64) for w in model.weights]
    for path in paths:
        reason = damage(path)
        if reason:
            raise UsageError(f"checkpoint {path} is damaged ({reason}); copy it again, or average fewer "
                             "(--num_last_checkpoints) to leave it out.")
        checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
        for total, weight in zip(sums, model.weights):
            total += weight.numpy()
    for weight, total in zip(model.weights, sums):
        weight.assign((total / len(paths)).astype(weight.dtype))
    averaged = {"averaged": [checkpoint_step(p) for p in paths]}
    return write_weights_run_dir(source, model, checkpoint_step(paths[-1]), target.path, averaged)


class BestCheckpoint:
    """Keeps `output_dir/best`, the checkpoint with the best value of a dev metric so far.

    The record {"step", "metric", "value"} is in best/run.json (the truth: written with the
    weights, atomically) and copied into the output_dir's run.json. `recover` repairs what a
    kill between the two writes left, so the record survives any kill and a resume.

    Args:
      run_dir: the trainer's output_dir.
      metric: the name of the dev metric (an `Evaluator` result key).
      higher_is_better: True for BLEU or F1, False for a loss.
    """

    def __init__(self, run_dir: RunDir, metric: str, higher_is_better: bool):
        self.run_dir = run_dir
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.path = os.path.join(run_dir.path, BEST_DIR)

    def record(self) -> dict | None:
        """The best checkpoint's record, or None before the first evaluation."""
        run_path = os.path.join(self.path, "run.json")
        if not files.isfile(run_path):
            return None
        return files.read_json(run_path, "it is the best checkpoint's record: restore it from a backup.").get("best")

    @staticmethod
    def recorded_metric(run_dir: RunDir) -> str | None:
        """The metric an existing output_dir/best was chosen by (or its earlier version, if a
        kill cut a swap), or None."""
        for name in (BEST_DIR, files.PREVIOUS_PREFIX + BEST_DIR):
            run_path = os.path.join(run_dir.path, name, "run.json")
            if files.isfile(run_path):
                record = files.read_json(run_path, "it is the best checkpoint's record: restore it from a backup.")
                return (record.get("best") or {}).get("metric")
        return None

    def recover(self) -> None:
        """Completes or rolls back an interrupted swap and re-syncs run.json's copy of the record."""
        files.recover(self.path)
        record = self.record()
        if record is not None and record.get("metric") != self.metric:
            raise UsageError(
                f"{self.path} keeps the best checkpoint by {record.get('metric')}, not {self.metric}; "
                f"use --keep_best={record.get('metric')}, or move {self.path} away."
            )
        info = self.run_dir.run_info()
        if info.get("best") != record:
            self.run_dir.write_run_info({**info, "best": record})

    def is_better(self, value: float) -> bool:
        record = self.record()
        if record is None:
            return True
        return value > record["value"] if self.higher_is_better else value < record["value"]

    def offer(self, model, step: int, value: float) -> bool:
        """Writes `model` as the best checkpoint if `value` beats the record; True if it did."""
        if not self.is_better(value):
            return False
        record = {"step": step, "metric": self.metric, "value": float(value)}
        write_weights_run_dir(self.run_dir, model, step, self.path, {"best": record})
        return True

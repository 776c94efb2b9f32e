"""The trainer's output directory: what the decoder, exporter and averager rebuild a model from.

    output_dir/
      hparams.json        the resolved HParams of the latest run
      run.json            problem name and the vocabulary the model was trained with
      vocab.spm.model     a copy of that vocabulary (the directory is self-contained)
      checkpoint, ckpt-<step>.index, ckpt-<step>.data-*   tf.train.Checkpoint files
      train/, eval/       TensorBoard event files
"""

from __future__ import annotations

import json
import os
import re
import shutil

import tensorflow as tf

from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import HParams

CHECKPOINT_PREFIX = "ckpt"


class RunDir:
    """Reads and writes the files of one output_dir."""

    def __init__(self, path: str):
        # Absolute, so the checkpoint state file never records paths relative to the cwd.
        self.path = os.path.abspath(os.path.expanduser(path))

    @property
    def hparams_path(self) -> str:
        return os.path.join(self.path, "hparams.json")

    @property
    def run_path(self) -> str:
        return os.path.join(self.path, "run.json")

    @property
    def vocab_path(self) -> str:
        return os.path.join(self.path, "vocab.spm.model")

    def ensure_writable(self) -> None:
        try:
            os.makedirs(self.path, exist_ok=True)
            probe = os.path.join(self.path, ".t2t_keras_write_test")
            open(probe, "w").close()
            os.remove(probe)
        except OSError as e:
            raise UsageError(f"--output_dir={self.path} is not writable ({e.strerror}); pick another directory.") from None

    def write(self, hparams: HParams, problem_name: str, vocabulary) -> None:
        """Records what a model in this directory is (atomically, file by file)."""
        _write_atomically(self.hparams_path, hparams.to_json().encode())
        run = {"problem": problem_name, "vocab_sha256": vocabulary.sha256, "vocab_size": vocabulary.size}
        _write_atomically(self.run_path, (json.dumps(run, indent=2, sort_keys=True) + "\n").encode())
        _write_atomically(self.vocab_path, vocabulary.model_proto)

    def exists(self) -> bool:
        return os.path.isfile(self.hparams_path)

    def hparams(self) -> HParams:
        if not os.path.isfile(self.hparams_path):
            raise UsageError(
                f"{self.hparams_path} is missing: --output_dir must be a directory t2t-keras-trainer wrote."
            )
        with open(self.hparams_path) as handle:
            return HParams.from_json(handle.read(), self.hparams_path)

    def run_info(self) -> dict:
        if not os.path.isfile(self.run_path):
            raise UsageError(f"{self.run_path} is missing: --output_dir must be a directory t2t-keras-trainer wrote.")
        with open(self.run_path) as handle:
            return json.load(handle)

    def vocabulary(self):
        from t2t_keras.data.tokenizers import Vocabulary

        if not os.path.isfile(self.vocab_path):
            raise UsageError(f"{self.vocab_path} is missing: --output_dir must be a directory t2t-keras-trainer wrote.")
        return Vocabulary.load(self.vocab_path)

    def checkpoints(self) -> list[str]:
        """Checkpoint paths, oldest first (as the checkpoint state file lists them)."""
        state = tf.train.get_checkpoint_state(self.path)
        if state is None:
            return []
        # Checkpoints live in this directory whatever path the state file recorded (a run
        # started with a relative --output_dir recorded paths relative to its cwd).
        return [os.path.join(self.path, os.path.basename(p)) for p in state.all_model_checkpoint_paths]

    def latest_checkpoint(self) -> str | None:
        return tf.train.latest_checkpoint(self.path)

    def require_checkpoint(self, checkpoint_path: str | None = None) -> str:
        """`checkpoint_path`, or the latest checkpoint; a UsageError if there is none."""
        if checkpoint_path:
            if not tf.io.gfile.exists(checkpoint_path + ".index"):
                raise UsageError(f"--checkpoint_path={checkpoint_path}: no such checkpoint (no {checkpoint_path}.index).")
            return checkpoint_path
        latest = self.latest_checkpoint()
        if latest is None:
            raise UsageError(f"--output_dir={self.path} has no checkpoint yet; train first (t2t-keras-trainer).")
        return latest

    def clear(self) -> None:
        """Removes checkpoints, records and events (for --start_over)."""
        for name in os.listdir(self.path):
            if name in ("hparams.json", "run.json", "vocab.spm.model", "checkpoint", "train", "eval") or name.startswith(CHECKPOINT_PREFIX + "-"):
                target = os.path.join(self.path, name)
                shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)


def checkpoint_step(path: str) -> int:
    """The global step in a checkpoint name: .../ckpt-1200 -> 1200."""
    match = re.search(rf"{CHECKPOINT_PREFIX}-(\d+)$", path)
    if not match:
        raise ValueError(f"{path}: not a t2t-keras checkpoint name ({CHECKPOINT_PREFIX}-<step>).")
    return int(match.group(1))


def _write_atomically(path: str, data: bytes) -> None:
    with open(path + ".incomplete", "wb") as handle:
        handle.write(data)
    os.replace(path + ".incomplete", path)

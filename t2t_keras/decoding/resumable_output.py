"""An output file on a local disk that decoding fills line by line, in input order, and that a
rerun of the same command continues after a kill or Ctrl-C. (An object store cannot append:
the decoder writes an output there in one piece when it is complete.)

Beside `path` lies `path.decode.json`, the record of what produces it: the input (path,
sha256, the block of lines), the checkpoints (path and the sha256 of each `.index`, which
holds the checksums of the weights), the decode settings that change outputs, n_best and
the columns before each output; and, unchecked, the kernels the last run decoded with. The
output itself is the progress: it only ever grows by complete lines (one write per batch of
finished inputs), so after a kill everything up to its last newline is kept. A rerun with the same record cuts a partial line, if any, to the last
complete input and appends after it; a rerun whose input, checkpoint or settings changed
is refused in one line. When decoding ends the record says "complete": a later rerun has
nothing to do.
"""

from __future__ import annotations

import dataclasses
import json
import os

from t2t_keras import files
from t2t_keras.errors import UsageError

RECORD_SUFFIX = ".decode.json"
FORMAT_VERSION = 2  # 2: the columns before each output are named (--with_scores printed log P in 1)
# Decode settings that only change speed, not outputs: a resume may change them (the kernels a
# search ran are in the record's "kernel_choices", as each run chose them, unchecked).
SPEED_SETTINGS = ("sentences_per_batch", "batch_tokens", "parallel_parts", "kernel_choices")


def output_record(input_path: str, lines: tuple[int, int], checkpoints: list[str], decode_hparams,
                  n_best: int, columns: tuple[str, ...], steering_files: dict | None = None) -> dict:
    """What an output is made from (see the module docstring); `steering_files`, {flag name:
    path or None} of the files that steer each line (their contents' sha256 recorded)."""
    settings = {key: value for key, value in dataclasses.asdict(decode_hparams).items() if key not in SPEED_SETTINGS}
    steering = {f"{name}_sha256": files.sha256(path) for name, path in (steering_files or {}).items() if path}
    return {
        **steering,
        "format_version": FORMAT_VERSION,
        "input": files.absolute(input_path),
        "input_sha256": files.sha256(input_path),
        "lines": list(lines),
        "checkpoints": [{"path": path, "index_sha256": files.sha256(path + ".index")} for path in checkpoints],
        "decode_hparams": settings,
        "n_best": n_best,
        "columns": list(columns),
    }


class ResumableOutput:
    """The output file `path` of the inputs `record["lines"]`, `lines_per_input` lines each."""

    def __init__(self, path: str, record: dict, lines_per_input: int):
        self.path = path
        self.record_path = path + RECORD_SUFFIX
        self.record = record
        self.notes = {}  # written beside the record, never checked on a resume (the kernel choices of this run)
        self.lines_per_input = lines_per_input
        self.handle = None

    def progress(self, start_over: bool = False) -> tuple[int, bool]:
        """(inputs already decoded, whether the output is complete), changing nothing; a
        UsageError if the output was made from another record. Cheap: a program asks before it
        builds a model, so that a refused or finished rerun ends at once."""
        _, done, complete = self._state(start_over)
        return done, complete

    def open(self, start_over: bool = False, inputs: int | None = None) -> tuple[int, bool]:
        """`progress`, then, unless complete, the output cut back to its last complete input (or
        to `inputs`, if fewer: where a companion output, written after it, ended) and open for
        appending."""
        previous, done, complete = self._state(start_over)
        if inputs is not None and inputs < done:
            done, complete = inputs, False
        if complete:
            return done, True
        files.write_atomically(self.record_path, json.dumps({**self.record, **self.notes, "complete": False}, indent=2) + "\n")
        mode = "r+b" if previous is not None and files.exists(self.path) else "wb"
        self.handle = files.open_file(self.path, mode, buffering=0)  # unbuffered: a refused write leaves nothing queued
        self.handle.truncate(self._offset_of(done) if mode == "r+b" else 0)
        self.handle.seek(0, os.SEEK_END)
        return done, False

    def write(self, lines: list[str]) -> None:
        """Appends complete lines in one write: a reader (or a kill) never sees half of a batch's
        line. A write the filesystem refuses (no space) is cut back to where it began, so the
        output still ends at a complete line, and raised naming the output."""
        if not lines:
            return
        data = memoryview("".join(line.replace("\n", " ") + "\n" for line in lines).encode("utf-8"))
        start = self.handle.tell()
        try:
            with files.writing(self.path):
                while data:  # the kernel may take part of it, then refuse the rest
                    data = data[self.handle.write(data):]
        except OSError:
            self.handle.truncate(start)
            self.handle.seek(start)
            raise

    def close(self, complete: bool) -> None:
        if self.handle is None:
            return
        with files.writing(self.path):
            os.fsync(self.handle.fileno())
        self.handle.close()
        self.handle = None
        if complete:
            files.write_atomically(self.record_path, json.dumps({**self.record, **self.notes, "complete": True}, indent=2) + "\n")

    def _state(self, start_over: bool) -> tuple[dict | None, int, bool]:
        """(the previous record, or None for a new output; inputs done; whether complete). A file
        at `path` that no record says the decoder wrote is never replaced unless `start_over`."""
        if start_over or not files.exists(self.path):
            return None, 0, False
        previous = self._previous_record()
        if previous is None:
            raise UsageError(
                f"--decode_to_file={self.path} exists and is not a t2t-keras-decoder output (no {self.record_path}); "
                "it is never replaced unasked: choose another --decode_to_file, or pass --start_over to replace it."
            )
        changed = [key for key in self.record if previous.get(key) != self.record[key]]
        if changed:
            raise UsageError(
                f"{self.path} was decoded with {_changes(changed)} (see {self.record_path}); "
                "rerun with --start_over to decode it again, or choose another --decode_to_file."
            )
        done = self.complete_inputs()
        first, end = self.record["lines"]
        return previous, done, bool(previous.get("complete")) and done == end - first

    def _previous_record(self) -> dict | None:
        if not files.exists(self.record_path):
            return None
        try:
            return json.loads(files.read_text(self.record_path))
        except json.JSONDecodeError:
            return None

    def complete_inputs(self) -> int:
        """Inputs whose lines are all in the output (a partial last line or group does not count)."""
        with files.open_file(self.path, "rb") as handle:
            lines = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))
        return lines // self.lines_per_input

    def _offset_of(self, inputs: int) -> int:
        """The byte offset just after the lines of the first `inputs` inputs."""
        wanted, offset = inputs * self.lines_per_input, 0
        if not wanted:
            return 0
        with files.open_file(self.path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                count = block.count(b"\n")
                if count < wanted:
                    wanted -= count
                    offset += len(block)
                    continue
                position = -1
                for _ in range(wanted):
                    position = block.index(b"\n", position + 1)
                return offset + position + 1
        return offset


def _changes(keys: list[str]) -> str:
    """What differs from the record, as a phrase: "another checkpoint and other decode settings"."""
    readable = {"input_sha256": "another input content", "input": "another input file", "lines": "another block of lines (shards)",
                "checkpoints": "another checkpoint", "decode_hparams": "other decode settings", "n_best": "another --n_best",
                "columns": "other --with_scores / --with_log_probs", "prefix_file_sha256": "another --prefix_file content",
                "avoid_file_sha256": "another --avoid_file content", "format_version": "another version of t2t-keras's output format"}
    phrases = [readable.get(key, f"another {key}") for key in keys]
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]

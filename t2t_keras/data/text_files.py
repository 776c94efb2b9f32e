"""Reading parallel text robustly: invalid UTF-8 is replaced and counted, never a crash."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import os
from typing import Iterator

from t2t_keras.errors import UsageError


@dataclasses.dataclass
class TextStats:
    """What reading found; merged into datagen's closing summary."""

    invalid_utf8_lines: list[str] = dataclasses.field(default_factory=list)  # "file:line"
    invalid_utf8_line_numbers: list[int] = dataclasses.field(default_factory=list)  # the same lines' numbers


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def read_lines(path: str, stats: TextStats, flag: str | None = None) -> Iterator[str]:
    """Lines of a text file (plain or .gz) without their newline.

    Invalid UTF-8 bytes become U+FFFD and the line is recorded in `stats` ("file:line" and
    its number). `flag` names the option the path came from, for the missing-file error.
    """
    if not os.path.isfile(path):
        raise UsageError(f"{flag}={path}: no such file." if flag else f"{path}: no such file.")
    with _open(path) as handle:
        for number, raw in enumerate(handle, start=1):
            raw = raw.rstrip(b"\r\n")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                stats.invalid_utf8_lines.append(f"{os.path.basename(path)}:{number}")
                stats.invalid_utf8_line_numbers.append(number)
                yield raw.decode("utf-8", errors="replace")


def read_parallel(source_path: str, target_path: str, stats: TextStats) -> Iterator[tuple[str, str]]:
    """(source line, target line) pairs; files of different lengths are an error naming both."""
    sources, targets = read_lines(source_path, stats), read_lines(target_path, stats)
    for number, (source, target) in enumerate(itertools.zip_longest(sources, targets), start=1):
        if source is None or target is None:
            longer, shorter = (target_path, source_path) if source is None else (source_path, target_path)
            raise UsageError(
                f"{longer} has more lines than {shorter} (line {number} has no partner); "
                "parallel files must be aligned line by line."
            )
        yield source, target

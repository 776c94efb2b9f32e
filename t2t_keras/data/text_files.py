"""Reading parallel text robustly: invalid UTF-8 is replaced and counted, never a crash."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import itertools
import os
import zlib
from typing import Iterator

from t2t_keras import files
from t2t_keras.errors import UsageError


@dataclasses.dataclass
class TextStats:
    """What reading found; merged into datagen's closing summary."""

    invalid_utf8_lines: list[str] = dataclasses.field(default_factory=list)  # "file:line"
    invalid_utf8_line_numbers: list[int] = dataclasses.field(default_factory=list)  # the same lines' numbers


@contextlib.contextmanager
def _open(path: str):
    """The bytes of `path`, decompressed if it ends in .gz (any filesystem, see `files`)."""
    with files.open_file(path, "rb") as handle:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=handle, mode="rb") as unzipped:
                yield unzipped
        else:
            yield handle


def read_lines(path: str, stats: TextStats, flag: str | None = None, strict: bool = False) -> Iterator[str]:
    """Lines of a text file (plain or .gz) without their newline.

    Invalid UTF-8 bytes become U+FFFD and the line is recorded in `stats` ("file:line" and
    its number), or, if `strict`, are a UsageError naming the file and line. `flag` names the
    option the path came from, for the errors about a missing or unreadable file.
    """
    named = f"{flag}={path}" if flag else path
    _require_file(path, named)
    number = 0
    try:
        with _open(path) as handle:
            for number, raw in enumerate(handle, start=1):
                raw = raw.rstrip(b"\r\n")
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if strict:
                        raise UsageError(
                            f"{path}:{number}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                            "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8."
                        ) from None
                    stats.invalid_utf8_lines.append(f"{os.path.basename(path)}:{number}")
                    stats.invalid_utf8_line_numbers.append(number)
                    yield raw.decode("utf-8", errors="replace")
    except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt .gz
        where = f" after line {number}" if number else ""
        raise UsageError(f"{named}: cannot be read{where} ({e}); check that it is a complete "
                         f"{'gzip' if path.endswith('.gz') else 'text'} file.") from None


def _require_file(path: str, named: str) -> None:
    """A UsageError unless `path` is a file; `named` says which flag gave it."""
    if files.isdir(path):
        raise UsageError(f"{named} is a directory; name a text file.")
    if not files.isfile(path):
        raise UsageError(f"{named}: no such file.")


def check_text_file(path: str, flag: str) -> None:
    """A UsageError naming `flag` unless `path` is a readable text file (plain or .gz) with at
    least one line: what can be known from its first bytes, before any pass over the data."""
    named = f"{flag}={path}"
    _require_file(path, named)
    try:
        with _open(path) as handle:
            first = handle.read(1)
    except (OSError, EOFError, zlib.error) as e:
        raise UsageError(f"{named}: cannot be read ({e}); check that it is a complete {'gzip' if path.endswith('.gz') else 'text'} file.") from None
    if not first:
        raise UsageError(f"{named} is empty; name a file with at least one line.")


def read_parallel(source_path: str, target_path: str, stats: TextStats, strict: bool = False) -> Iterator[tuple[str, str]]:
    """(source line, target line) pairs; files of different lengths are an error naming both
    (and, if `strict`, so is an empty file or invalid UTF-8, see `read_lines`)."""
    sources, targets = read_lines(source_path, stats, strict=strict), read_lines(target_path, stats, strict=strict)
    number = 0
    for number, (source, target) in enumerate(itertools.zip_longest(sources, targets), start=1):
        if source is None or target is None:
            longer, shorter = (target_path, source_path) if source is None else (source_path, target_path)
            raise UsageError(
                f"{longer} has more lines than {shorter} (line {number} has no partner); "
                "parallel files must be aligned line by line."
            )
        yield source, target
    if strict and number == 0:
        raise UsageError(f"{source_path} and {target_path} are empty; name files with at least one line each.")


def count_lines(path: str, flag: str | None = None) -> int:
    """How many lines `read_lines` yields for `path` (a last line without a newline counts)."""
    named = f"{flag}={path}" if flag else path
    _require_file(path, named)
    count, last = 0, b"\n"
    try:
        with _open(path) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                count += block.count(b"\n")
                last = block[-1:]
    except (OSError, EOFError, zlib.error) as e:
        raise UsageError(f"{named}: cannot be read ({e}); check that it is a complete file.") from None
    return count + (last != b"\n")

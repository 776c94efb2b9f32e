"""Reading parallel text robustly: invalid UTF-8 is replaced and counted, never a crash; a file
in another encoding altogether (UTF-16, UTF-32) is refused in one line naming the iconv that
converts it. A line is what ends in a newline byte, as `wc -l` counts; a UTF-8 byte-order mark
is not part of the first line."""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import gzip
import itertools
import os
import shlex
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
    its number), or, if `strict`, are a UsageError naming the file and line. A file whose first
    line shows another encoding (see `check_text_file`) is a UsageError; a UTF-8 byte-order mark
    is dropped. `flag` names the option the path came from, for the errors about the file.
    """
    named = f"{flag}={path}" if flag else path
    _require_file(path, named)
    number = 0
    try:
        with _open(path) as handle:
            for number, raw in enumerate(handle, start=1):
                if number == 1:
                    _refuse_other_encodings(raw, path, named)
                    raw = raw.removeprefix(codecs.BOM_UTF8)
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


def check_text_file(path: str, flag: str, empty_ok: bool = False) -> None:
    """A UsageError naming `flag` unless `path` is a readable UTF-8 text file (plain or .gz) with
    at least one line (or, if `empty_ok`, none): what can be known from its first bytes, before
    any pass over the data or any model loads."""
    named = f"{flag}={path}"
    _require_file(path, named)
    try:
        with _open(path) as handle:
            head = handle.read(1)
            head += _rest_of_head(handle)
    except (OSError, EOFError, zlib.error) as e:
        raise UsageError(f"{named}: cannot be read ({e}); check that it is a complete {'gzip' if path.endswith('.gz') else 'text'} file.") from None
    if not head and not empty_ok:
        raise UsageError(f"{named} is empty; name a file with at least one line.")
    _refuse_other_encodings(head, path, named)


HEAD_BYTES = 1 << 16  # what `check_text_file` reads of a file to tell its encoding


def _rest_of_head(handle) -> bytes:
    """Up to HEAD_BYTES - 1 more bytes of `handle`, fewer where it cannot be read further: a .gz
    cut short there is named, with its line, by the pass over the data."""
    rest = b""
    while len(rest) < HEAD_BYTES - 1:
        try:
            block = handle.read(min(1 << 12, HEAD_BYTES - 1 - len(rest)))
        except (OSError, EOFError, zlib.error):
            break
        if not block:
            break
        rest += block
    return rest


# The byte-order marks of the encodings iconv converts to UTF-8, UTF-32's first: UTF-32 LE's
# mark begins with UTF-16 LE's.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32", "little-endian"),
    (codecs.BOM_UTF32_BE, "UTF-32", "big-endian"),
    (codecs.BOM_UTF16_LE, "UTF-16", "little-endian"),
    (codecs.BOM_UTF16_BE, "UTF-16", "big-endian"),
)


def _refuse_other_encodings(head: bytes, path: str, named: str) -> None:
    """A UsageError naming the encoding and the iconv command that converts `path` if its first
    bytes `head` show it is not UTF-8 text at all: a UTF-16 or UTF-32 byte-order mark, or NUL
    bytes, which no text has and UTF-16 has in every other byte of Latin-script text. (Its
    newline, 0A 00, would otherwise split it into lines that start with a NUL, one more than
    the file has.) Stray invalid bytes are not refused here: `read_lines` replaces them."""
    for mark, encoding, order in _BYTE_ORDER_MARKS:
        if head.startswith(mark):
            raise UsageError(f"{named} is {encoding} ({order}, with a byte-order mark), not UTF-8: convert it with "
                             f"{_iconv(path, encoding)}")
    if b"\0" not in head:
        return
    if head.startswith(b"\x1f\x8b"):
        raise UsageError(f"{named} is gzip-compressed but its name does not end in .gz: rename it, "
                         f"e.g. mv {shlex.quote(path)} {shlex.quote(path + '.gz')}")
    encoding, order = _encoding_of_nul_bytes(head)
    raise UsageError(f"{named} has NUL bytes, so it is not UTF-8 text; if it is {encoding[:6]} ({order}, without a "
                     f"byte-order mark, as the NULs' places suggest), convert it with {_iconv(path, encoding)}")


def _encoding_of_nul_bytes(head: bytes) -> tuple[str, str]:
    """(iconv's name, byte order) of the UTF-16 or UTF-32 that puts NUL bytes where `head` has
    them: in ASCII-range text, 'a\\0' is UTF-16LE, '\\0a' UTF-16BE, 'a\\0\\0\\0' UTF-32LE,
    '\\0\\0\\0a' UTF-32BE."""
    nul_share = [head[k::4].count(0) / max(1, len(head[k::4])) for k in range(4)]
    mostly_nul = [share > 0.5 for share in nul_share]
    if mostly_nul == [False, True, True, True]:
        return "UTF-32LE", "little-endian"
    if mostly_nul == [True, True, True, False]:
        return "UTF-32BE", "big-endian"
    if nul_share[1] + nul_share[3] > nul_share[0] + nul_share[2]:
        return "UTF-16LE", "little-endian"
    return "UTF-16BE", "big-endian"


def _iconv(path: str, encoding: str) -> str:
    """The shell command that writes `path`, in `encoding`, as UTF-8 beside it: a.en -> a.utf8.en."""
    plain = path.removesuffix(".gz")
    stem, extension = os.path.splitext(plain)
    converted = shlex.quote(f"{stem}.utf8{extension}")
    if path.endswith(".gz"):
        return f"gunzip -c {shlex.quote(path)} | iconv -f {encoding} -t UTF-8 > {converted}"
    return f"iconv -f {encoding} -t UTF-8 {shlex.quote(path)} > {converted}"


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

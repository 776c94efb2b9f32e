"""Decoding text files and interactive input with a trained model: reading, windows, writing.

A file is read a window of lines at a time; each window is translated as the Python API
translates a list (`t2t_keras.Translator`: sorted by length into batches, the n best
hypotheses of each line, an empty line gets empty ones) and written back in input order.
Invalid UTF-8 is replaced (U+FFFD) and reported with its line numbers.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from typing import Iterable, Iterator

import tqdm

from t2t_keras import files
from t2t_keras.data.text_files import TextStats, read_lines
from t2t_keras.decoding.alignment import pharaoh
from t2t_keras.decoding.hypothesis import Hypothesis


@dataclasses.dataclass
class DecodeReport:
    lines: int = 0
    empty_lines: int = 0
    invalid_utf8_lines: list = dataclasses.field(default_factory=list)  # 1-based line numbers
    repairs: int = 0  # edits that made outputs well-formed (parsing)
    missing_terms: list = dataclasses.field(default_factory=list)  # 1-based numbers of lines whose best output lacks a required term


def read_source_lines(path: str, report: DecodeReport, flag: str = "--decode_from_file") -> list[str]:
    """The lines of `path` (invalid UTF-8 replaced and recorded in `report`)."""
    stats = TextStats()
    lines = list(read_lines(path, stats, flag))
    report.lines = len(lines)
    report.invalid_utf8_lines = stats.invalid_utf8_line_numbers
    return lines


def decode_stream(translate_window, numbered_lines: Iterator[tuple[int, str]], write, window_size: int,
                  columns: tuple[str, ...] = (), report: DecodeReport | None = None, progress=False,
                  steering: Iterator[tuple] | None = None, write_alignments=None) -> DecodeReport:
    """Decodes (line number, line) pairs a window of `window_size` lines at a time and hands
    each window to `write` as output lines in input order (with the `columns` of
    `output_lines`). `translate_window(lines, line_numbers, on_lines)` -> (each line's
    `Hypothesis` list, repairs) is the Python API's (`t2t_keras.Translator`), so the decoder
    and the API decode alike; `steering` yields each line's (prefix, avoided terms, required
    terms), read alongside; `write_alignments`, if given, receives each output line's word alignment
    (Pharaoh "i-j ..."), after `write` has its window. Memory holds one window, never the whole
    input."""
    report = report or DecodeReport()
    bar = progress if isinstance(progress, tqdm.tqdm) else tqdm.tqdm(
        unit=" lines", disable=not progress, file=sys.stderr, mininterval=1.0)
    if steering is not None:
        numbered_lines = ((number, (line, *steer)) for (number, line), steer in zip(numbered_lines, steering))
    try:
        for numbers, lines in windows(numbered_lines, window_size):
            steered = {}
            if steering is not None:
                lines, prefixes, avoids, constraints = (list(column) for column in zip(*lines))
                steered = {"prefixes": prefixes, "avoids": avoids, "constraints": constraints}
            outputs, repairs = translate_window(lines, numbers, bar.update, **steered)
            report.missing_terms += [number + 1 for number, hypotheses in zip(numbers, outputs) if hypotheses[0].missing]
            report.lines += len(lines)
            report.empty_lines += sum(not line.strip() for line in lines)
            report.repairs += repairs
            write(output_lines(outputs, columns))
            if write_alignments is not None:
                write_alignments([pharaoh(h.alignment or ()) for hypotheses in outputs for h in hypotheses])
    finally:
        if bar is not progress:
            bar.close()
    return report


def read_term_lines(path: str, flag: str = "--avoid_file") -> Iterator[list[str] | None]:
    """Each line of `path` as the terms its input line's output must not (--avoid_file) or must
    (--constraints_file) contain: a JSON list of strings (an empty line: None); anything else
    is one line naming the file and line."""
    import json

    from t2t_keras.errors import UsageError

    for number, line in enumerate(read_lines(path, TextStats(), flag), start=1):
        if not line.strip():
            yield None
            continue
        try:
            terms = json.loads(line)
        except ValueError as error:
            terms = error
        if not isinstance(terms, list) or not all(isinstance(term, str) for term in terms):
            raise UsageError(f"{flag}={path}:{number}: {line[:60]!r} is not a JSON list of strings; write one list a "
                             "line, e.g. [\"Hund\", \"rote Katze\"] (an empty line: none).")
        yield terms


def windows(numbered_lines: Iterable[tuple[int, str]], size: int) -> Iterator[tuple[list[int], list[str]]]:
    """(line numbers, lines) of `size` (line number, line) pairs at a time, read lazily."""
    numbered_lines = iter(numbered_lines)
    while True:
        window = list(itertools.islice(numbered_lines, size))
        if not window:
            return
        yield [number for number, _ in window], [line for _, line in window]


def window_lines(hparams) -> int:
    """Lines read, sorted and decoded together: 8 batches' worth (1024 at the default 128 a batch),
    enough for the length sort to fill batches with sentences of like length."""
    return 8 * hparams.sentences_per_batch


SCORE_COLUMNS = ("score", "log_prob")  # the Hypothesis fields a decoder output line may start with, in this order


def output_lines(outputs: list[list[Hypothesis]], columns: tuple[str, ...] = ()) -> list[str]:
    """What the decoder writes: a line per hypothesis (n_best consecutive lines per input), its
    text after the `columns` asked for, tab-separated: "score" (what the search ranked by, as
    the SavedModel's scores) and "log_prob" (log P(text | input)), as --with_scores and
    --with_log_probs ask: "-0.4170\t-1.6463\tEin Hund rennt."."""
    unknown = set(columns) - set(SCORE_COLUMNS)
    if unknown:
        raise ValueError(f"output columns are {SCORE_COLUMNS}, not {sorted(unknown)}")
    return ["\t".join([*(f"{getattr(h, name):.4f}" for name in columns), h.text]) for hypotheses in outputs for h in hypotheses]


def write_lines(path: str, lines: Iterable[str]) -> None:
    """Writes `lines` to `path` through a temporary name, so no half-written file is left."""
    with files.atomic_path(path) as temporary, files.open_file(temporary, "w") as handle:
        for line in lines:
            handle.write(line.replace("\n", " ") + "\n")


def interactive(translator, read=input, write=print) -> None:
    """Translates each line typed at the prompt until end of input (`translator`: a
    `t2t_keras.Translator`)."""
    while True:
        try:
            line = read("> ")
        except EOFError:
            return
        write(translator.generate([line])[0])

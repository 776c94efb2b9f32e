"""Decoding text files and interactive input with a trained model.

Lines are tokenised, sorted by length so that batches hold sentences of similar length,
translated with the Translator's beam search, and written back in input order: one output
line per input line, an empty line for an empty line. Invalid UTF-8 is replaced (U+FFFD)
and reported with its line numbers.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Iterable

import numpy as np
import tqdm

from t2t_keras import files
from t2t_keras.data.text_files import TextStats, read_lines
from t2t_keras.token_ids import PAD_ID


@dataclasses.dataclass
class DecodeReport:
    lines: int = 0
    empty_lines: int = 0
    invalid_utf8_lines: list = dataclasses.field(default_factory=list)  # 1-based line numbers


def read_source_lines(path: str, report: DecodeReport, flag: str = "--decode_from_file") -> list[str]:
    """The lines of `path` (invalid UTF-8 replaced and recorded in `report`)."""
    stats = TextStats()
    lines = list(read_lines(path, stats, flag))
    report.lines = len(lines)
    report.invalid_utf8_lines = stats.invalid_utf8_line_numbers
    return lines


def translate_lines(translator, lines: list[str], report: DecodeReport | None = None, progress: bool = False) -> list[str]:
    """Translations of `lines`, in their order; tab-joined beams if return_beams is set."""
    report = report or DecodeReport()
    vocabularies, hparams = translator.vocabularies, translator.decode_hparams
    encoded = [vocabularies.source.encode(line, add_eos=True) if line.strip() else None for line in lines]
    report.empty_lines = sum(ids is None for ids in encoded)
    order = sorted((i for i, ids in enumerate(encoded) if ids is not None), key=lambda i: -len(encoded[i]))
    outputs = [""] * len(lines)
    bar = tqdm.tqdm(total=len(order), unit=" sentences", disable=not progress, file=sys.stderr, mininterval=1.0)
    for start in range(0, len(order), hparams.sentences_per_batch):
        chunk = order[start : start + hparams.sentences_per_batch]
        batch = np.full([len(chunk), max(len(encoded[i]) for i in chunk)], PAD_ID, np.int32)
        for row, i in enumerate(chunk):
            batch[row, : len(encoded[i])] = encoded[i]
        result = translator.translate_ids(batch)
        beams = result["ids"].numpy()
        for row, i in enumerate(chunk):
            texts = [vocabularies.target.decode(ids) for ids in (beams[row] if hparams.return_beams else beams[row, :1])]
            outputs[i] = "\t".join(texts)
        bar.update(len(chunk))
    bar.close()
    return outputs


def postprocess_lines(problem, sources: list[str], outputs: list[str]) -> tuple[list[str], int]:
    """The problem's form of each output (every beam of it), and the repairs that took in all."""
    lines, repairs = [], 0
    for source, output in zip(sources, outputs):
        if not source.strip():
            lines.append(output)
            continue
        beams = []
        for beam in output.split("\t"):
            text, count = problem.postprocess_output(source, beam)
            beams.append(text)
            repairs += count
        lines.append("\t".join(beams))
    return lines, repairs


def write_lines(path: str, lines: Iterable[str]) -> None:
    """Writes `lines` to `path` through a temporary name, so no half-written file is left."""
    with files.atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line.replace("\n", " ") + "\n")


def interactive(translator, read=input, write=print) -> None:
    """Translates each line typed at the prompt until end of input."""
    while True:
        try:
            line = read("> ")
        except EOFError:
            return
        write(translate_lines(translator, [line])[0])

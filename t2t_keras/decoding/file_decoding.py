"""Decoding text files and interactive input with a trained model.

Lines are tokenised, sorted by length so that batches hold sentences of similar length,
translated with the Translator's beam search, and written back in input order: the n best
hypotheses of each line (an empty line gets empty ones), each with its log-probability. Invalid UTF-8 is replaced (U+FFFD) and reported with its line numbers.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Iterable, NamedTuple

import numpy as np
import tqdm

from t2t_keras import files
from t2t_keras.data.text_files import TextStats, read_lines
from t2t_keras.errors import UsageError
from t2t_keras.token_ids import PAD_ID


class Hypothesis(NamedTuple):
    """One output of beam search for one input."""

    text: str
    log_prob: float | None  # log P(text | input), EOS included, of the text as tokenised: what the score signature gives (None: not asked for)
    score: float  # what beam search ranked by: the log-probability of the searched pieces / ((5 + pieces) / 6) ** alpha


EMPTY = Hypothesis("", 0.0, 0.0)  # what an empty input line gets (as in the SavedModel)


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


def translate_lines(translator, lines: list[str], report: DecodeReport | None = None, progress: bool = False,
                    n_best: int = 1, log_probs: bool = True) -> list[list[Hypothesis]]:
    """The `n_best` (at most beam_size) best hypotheses of each line, best first, in input order.

    `log_probs=False` leaves Hypothesis.log_prob None and skips the teacher-forced pass that
    computes it (a second forward over every output: long for parsing)."""
    report = report or DecodeReport()
    vocabularies, hparams = translator.vocabularies, translator.decode_hparams
    if not 1 <= n_best <= hparams.beam_size:
        raise UsageError(f"--n_best={n_best}: choose 1 to beam_size ({hparams.beam_size}).")
    encoded = [vocabularies.source.encode(line, add_eos=True) if line.strip() else None for line in lines]
    report.empty_lines = sum(ids is None for ids in encoded)
    order = sorted((i for i, ids in enumerate(encoded) if ids is not None), key=lambda i: -len(encoded[i]))
    texts, scores = {}, {}
    bar = tqdm.tqdm(total=len(lines), unit=" lines", disable=not progress, file=sys.stderr, mininterval=1.0)
    bar.update(report.empty_lines)
    for start in range(0, len(order), hparams.sentences_per_batch):
        chunk = order[start : start + hparams.sentences_per_batch]
        result = translator.translate_ids(padded_batch([encoded[i] for i in chunk]))
        ids, search_scores = result["ids"].numpy(), result["scores"].numpy()
        for row, i in enumerate(chunk):
            texts[i] = [vocabularies.target.decode(ids[row, k]) for k in range(n_best)]
            scores[i] = [float(score) for score in search_scores[row, :n_best]]
        bar.update(len(chunk))
    bar.close()
    # The log-probability of each text as the score path tokenises it: the search may have
    # spelled a word with other pieces than the tokenizer would (same text, another score).
    pairs = [(lines[i], text) for i in order for text in texts[i]]
    if log_probs:
        rescored = iter(score_lines(translator, [source for source, _ in pairs], [text for _, text in pairs]))
    else:
        rescored = iter([None] * len(pairs))
    outputs = [[EMPTY] * n_best for _ in lines]
    for i in order:
        outputs[i] = [Hypothesis(text, next(rescored), score) for text, score in zip(texts[i], scores[i])]
    return outputs


def score_lines(translator, sources: list[str], targets: list[str]) -> list[float]:
    """log P(target | source) of each pair (EOS included), as the SavedModel's score signature."""
    vocabularies, batch_size = translator.vocabularies, translator.decode_hparams.sentences_per_batch
    pairs = [(vocabularies.source.encode(s, add_eos=True), vocabularies.target.encode(t, add_eos=True)) for s, t in zip(sources, targets)]
    scores = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        result = translator.score_ids(padded_batch([s for s, _ in chunk]), padded_batch([t for _, t in chunk]))
        scores += [float(score) for score in result["scores"].numpy()]
    return scores


def padded_batch(rows: list[list[int]]) -> np.ndarray:
    """Id lists as one int32 batch [len(rows), longest], 0-padded."""
    batch = np.full([len(rows), max(map(len, rows))], PAD_ID, np.int32)
    for row, ids in enumerate(rows):
        batch[row, : len(ids)] = ids
    return batch


def postprocess(problem, sources: list[str], outputs: list[list[Hypothesis]]) -> tuple[list[list[Hypothesis]], int]:
    """Every hypothesis in the problem's output form (parsing: a tree over the input's words),
    and the repairs that took in all."""
    processed, repairs = [], 0
    for source, hypotheses in zip(sources, outputs):
        if not source.strip():
            processed.append(hypotheses)
            continue
        line = []
        for hypothesis in hypotheses:
            text, count = problem.postprocess_output(source, hypothesis.text)
            line.append(hypothesis._replace(text=text))
            repairs += count
        processed.append(line)
    return processed, repairs


def output_lines(outputs: list[list[Hypothesis]], with_scores: bool = False) -> list[str]:
    """What the decoder writes: a line per hypothesis (n_best consecutive lines per input),
    "<log_prob>\t<text>" with scores."""
    return [f"{h.log_prob:.4f}\t{h.text}" if with_scores else h.text for hypotheses in outputs for h in hypotheses]


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
        write(translator.translate([line])[0])

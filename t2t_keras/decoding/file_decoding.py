"""Decoding text files and interactive input with a trained model.

Lines are tokenised, sorted by length so that batches hold sentences of similar length,
translated with the Translator's beam search, and written back in input order: the n best
hypotheses of each line (an empty line gets empty ones), each with its log-probability. Invalid UTF-8 is replaced (U+FFFD) and reported with its line numbers.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from typing import Iterable, Iterator, NamedTuple

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
    repairs: int = 0  # edits that made outputs well-formed (parsing)


def read_source_lines(path: str, report: DecodeReport, flag: str = "--decode_from_file") -> list[str]:
    """The lines of `path` (invalid UTF-8 replaced and recorded in `report`)."""
    stats = TextStats()
    lines = list(read_lines(path, stats, flag))
    report.lines = len(lines)
    report.invalid_utf8_lines = stats.invalid_utf8_line_numbers
    return lines


def translate_lines(translator, lines: list[str], report: DecodeReport | None = None, progress=False,
                    n_best: int = 1, log_probs: bool = True, line_numbers: list[int] | None = None) -> list[list[Hypothesis]]:
    """The `n_best` (at most beam_size) best hypotheses of each line, best first, in input order.

    `log_probs=False` leaves Hypothesis.log_prob None and skips the teacher-forced pass that
    computes it (a second forward over every output: long for parsing). `progress` is a
    tqdm bar to advance (or True for a new one). With sampling, line i's samples come from
    the seed of its number `line_numbers[i]` (default: i), whatever batch it lands in."""
    report = report or DecodeReport()
    vocabularies, hparams = translator.vocabularies, translator.decode_hparams
    if not 1 <= n_best <= hparams.beam_size:
        raise UsageError(f"--n_best={n_best}: choose 1 to beam_size ({hparams.beam_size}).")
    line_numbers = list(range(len(lines))) if line_numbers is None else line_numbers
    encoded = [vocabularies.source.encode(line, add_eos=True) if line.strip() else None for line in lines]
    empty = sum(ids is None for ids in encoded)
    report.empty_lines += empty
    order = sorted((i for i, ids in enumerate(encoded) if ids is not None), key=lambda i: -len(encoded[i]))
    texts, scores = {}, {}
    bar = progress if isinstance(progress, tqdm.tqdm) else tqdm.tqdm(
        total=len(lines), unit=" lines", disable=not progress, file=sys.stderr, mininterval=1.0)
    bar.update(empty)
    for chunk in batches([len(encoded[i]) for i in order], hparams):
        rows = [order[k] for k in chunk]
        batch = padded_batch([encoded[i] for i in rows])
        if hparams.sampling:
            result = translator.sample_ids(batch, np.array([line_seed(hparams.seed, line_numbers[i]) for i in rows], np.int64))
        else:
            result = translator.translate_ids(batch)
        ids, search_scores = result["ids"].numpy(), result["scores"].numpy()
        for row, i in enumerate(rows):
            texts[i] = [vocabularies.target.decode(ids[row, k]) for k in range(n_best)]
            scores[i] = [float(score) for score in search_scores[row, :n_best]]
        bar.update(len(rows))
    if bar is not progress:
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


def batches(lengths: list[int], hparams) -> Iterator[list[int]]:
    """Positions in `lengths` (sorted longest first) grouped into batches: sentences_per_batch
    at a time, or with batch_tokens, as many as fit count x longest <= batch_tokens (at least
    one, at most sentences_per_batch)."""
    start = 0
    while start < len(lengths):
        end = min(start + hparams.sentences_per_batch, len(lengths))
        if hparams.batch_tokens:
            longest = lengths[start]
            end = min(end, start + max(1, hparams.batch_tokens // max(longest, 1)))
        yield list(range(start, end))
        start = end


def line_seed(seed: int, line_number: int) -> int:
    """The sampling seed of one input line: the decode seed in the high 32 bits, the line's
    number in the low ones."""
    return (seed << 32) | (line_number & 0xFFFFFFFF)


def score_lines(translator, sources: list[str], targets: list[str]) -> list[float]:
    """log P(target | source) of each pair (EOS included), as the SavedModel's score signature;
    a blank source scores 0, as its (empty) translation does everywhere."""
    vocabularies, batch_size = translator.vocabularies, translator.decode_hparams.sentences_per_batch
    scored = [i for i, source in enumerate(sources) if source.strip()]
    pairs = [(vocabularies.source.encode(sources[i], add_eos=True), vocabularies.target.encode(targets[i], add_eos=True))
             for i in scored]
    scores = [0.0] * len(sources)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        result = translator.score_ids(padded_batch([s for s, _ in chunk]), padded_batch([t for _, t in chunk]))
        for i, score in zip(scored[start : start + batch_size], result["scores"].numpy()):
            scores[i] = float(score)
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


def decode_stream(translator, problem, numbered_lines: Iterator[tuple[int, str]], write, n_best: int = 1,
                  with_scores: bool = False, report: DecodeReport | None = None, progress=False) -> DecodeReport:
    """Decodes (line number, line) pairs a window at a time (`window_lines`): sorted by length
    into batches within the window, postprocessed, and handed to `write` as output lines in
    input order once the window is done. Memory holds one window, never the whole input."""
    report = report or DecodeReport()
    window_size = window_lines(translator.decode_hparams)
    while True:
        window = list(itertools.islice(numbered_lines, window_size))
        if not window:
            return report
        numbers, lines = [number for number, _ in window], [line for _, line in window]
        outputs = translate_lines(translator, lines, report, progress, n_best, with_scores, line_numbers=numbers)
        outputs, repairs = postprocess(problem, lines, outputs)
        report.lines += len(lines)
        report.repairs += repairs
        write(output_lines(outputs, with_scores))


def window_lines(hparams) -> int:
    """Lines read, sorted and decoded together: 8 batches' worth, at least 256."""
    return max(256, 8 * hparams.sentences_per_batch)


def output_lines(outputs: list[list[Hypothesis]], with_scores: bool = False) -> list[str]:
    """What the decoder writes: a line per hypothesis (n_best consecutive lines per input),
    "<log_prob>\t<text>" with scores."""
    return [f"{h.log_prob:.4f}\t{h.text}" if with_scores else h.text for hypotheses in outputs for h in hypotheses]


def write_lines(path: str, lines: Iterable[str]) -> None:
    """Writes `lines` to `path` through a temporary name, so no half-written file is left."""
    with files.atomic_path(path) as temporary, files.open_file(temporary, "w") as handle:
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


def require_sentence_list(sentences, method: str) -> None:
    """A TypeError for a bare string where a list of sentences belongs (it would be read as
    one sentence per character); the Translator and ExportedTranslator both check."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f"{method} takes a list of sentences, e.g. {method}([\"A dog runs.\"]), not a string.")

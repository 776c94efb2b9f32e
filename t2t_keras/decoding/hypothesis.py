"""Hypothesis: one output of decoding for one input, what every interface returns."""

from __future__ import annotations

from typing import NamedTuple


class Hypothesis(NamedTuple):
    """One output of beam search (or one sample) for one input."""

    text: str
    log_prob: float | None  # log P(text | input), EOS included, of the text as tokenised: what the score signature gives (None: not asked for)
    score: float  # what beam search ranked by: the log-probability of the searched pieces / ((5 + pieces) / 6) ** alpha
    # (after a forced prefix: the prefix's log-probability + the rest's over the rest's length)
    truncated: bool = False  # the input was longer than max_input_tokens and only its first ones were translated
    alignment: tuple | None = None  # with alignments=True: (source word, target word) index pairs over whitespace words
    missing: tuple = ()  # the terms that had to appear and do not (the maximum length left no room for them)


EMPTY = Hypothesis("", 0.0, 0.0)  # what an empty input line gets (as in the SavedModel)

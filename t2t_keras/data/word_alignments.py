"""Word alignments of training pairs, for guided alignment (Garg et al., 2019): which source
words each target word translates, found by eflomal (Östling and Tiedemann, 2016; the
`alignment` extra) at datagen and stored with the shards as piece links.

eflomal aligns the whitespace words of every pair in both directions; the links both
directions agree on (their intersection: few, but precise) are kept. A word link links every
piece of the source word to every piece of the target word; a pair's links are stored in its
Example as one int64 list, `(source piece + 1, target piece + 1)` after another, so that 0 is
padding in a batch (`tfrecords.ALIGNMENT`).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from t2t_keras import extras

METHOD = "eflomal, both directions' intersection, over whitespace words"
WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word


def word_links(pairs: list[tuple[str, str]]) -> list[set[tuple[int, int]]]:
    """The (source word, target word) links of each (source, target) text pair that eflomal's
    two directions agree on."""
    return [forward & reverse for forward, reverse in directional_links(pairs)]


def directional_links(pairs: list[tuple[str, str]]) -> list[tuple[set, set]]:
    """Each pair's (forward, reverse) links by eflomal, both as (source word, target word)."""
    eflomal = extras.require("alignment")
    if not pairs:
        return []
    with tempfile.TemporaryDirectory(prefix="t2t_keras_align_") as scratch:
        forward, reverse = os.path.join(scratch, "forward"), os.path.join(scratch, "reverse")
        eflomal.Aligner().align([" ".join(s.split()) for s, _ in pairs], [" ".join(t.split()) for _, t in pairs],
                                links_filename_fwd=forward, links_filename_rev=reverse, quiet=True)
        with open(forward, encoding="utf-8") as f, open(reverse, encoding="utf-8") as r:
            return [(_links(a), _links(b)) for a, b in zip(f, r)]


def _links(line: str) -> set[tuple[int, int]]:
    return {tuple(int(i) for i in link.split("-")) for link in line.split()}


def word_of_pieces(pieces: list[str]) -> np.ndarray:
    """Each piece's whitespace word (0-based): a piece starting with the word-start mark begins
    the next word; the first piece is word 0 whatever it starts with."""
    starts = np.array([i > 0 and piece.startswith(WORD_START) for i, piece in enumerate(pieces)], np.int64)
    return np.cumsum(starts)


def piece_links(links: set[tuple[int, int]], source_pieces: list[str], target_pieces: list[str]) -> list[int]:
    """`links` between words as the flat list stored with a pair: (source piece + 1, target
    piece + 1) for every piece of each linked word pair, over the pieces without EOS."""
    source_words, target_words = word_of_pieces(source_pieces), word_of_pieces(target_pieces)
    flat = []
    for source_word, target_word in sorted(links):
        for s in np.flatnonzero(source_words == source_word):
            for t in np.flatnonzero(target_words == target_word):
                flat += [int(s) + 1, int(t) + 1]
    return flat

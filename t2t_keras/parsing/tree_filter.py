"""Decoding constrained to well-formed linearised trees over exactly the input's words.

A `beam_search.TokenFilter`: each hypothesis may take only tokens that keep it a prefix of
a tree that can still be completed within its maximum length:
  "(LABEL"  while words are left, inside the root (or as the root, first), at most
            MAX_CONSTITUENTS_PER_WORD per input word in all
  XX        while words are left, inside a constituent
  ")"       when a constituent is open and not empty; the root only after the last word
  EOS       once the root is closed and every word has its XX
So every finished hypothesis is a tree with one XX per input word, at most 5 tokens per
word long, and the search spends its beam on trees instead of on sequences that `restore`
would have to repair (or on endless unary chains).

Token classes come from the target vocabulary's pieces: "▁XX", "▁)" and "▁(LABEL" (a
label that the vocabulary splits into several pieces cannot be produced). The number of
words is the number of word-initial ("▁...") pieces of the source.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.beam_search import tile_for_beams
from t2t_keras.parsing.trees import CLOSE, PLACEHOLDER
from t2t_keras.token_ids import EOS_ID

WORD_START = "\u2581"  # SentencePiece's word-boundary mark
OTHER, OPEN, WORD, SHUT, END = range(5)  # token classes; OTHER is never allowed
# A tree over n words has at most n - 1 branching constituents; with unary chains the
# NLTK sample's training trees reach 1.5 per word.
MAX_CONSTITUENTS_PER_WORD = 2


class TreeFilter:
    """The parsing TokenFilter for a problem's (source, target) `Vocabularies`."""

    def __init__(self, vocabularies):
        pieces = vocabularies.target.pieces(range(vocabularies.target.size))
        classes = np.full(len(pieces), OTHER, np.int32)
        for token, piece in enumerate(pieces):
            if piece == WORD_START + PLACEHOLDER:
                classes[token] = WORD
            elif piece == WORD_START + CLOSE:
                classes[token] = SHUT
            elif piece.startswith(WORD_START + "(") and len(piece) > 2:
                classes[token] = OPEN
        classes[EOS_ID] = END
        if not {OPEN, WORD, SHUT} <= set(classes.tolist()):
            raise ValueError("TreeFilter: the target vocabulary has no single pieces for '(LABEL', 'XX' and ')'.")
        # (control pieces such as "</s>" and byte pieces "<0x41>" do not start with the mark)
        starts_word = [piece.startswith(WORD_START) for piece in vocabularies.source.pieces(range(vocabularies.source.size))]
        self.token_classes = tf.constant(classes)
        self.starts_word = tf.constant(np.asarray(starts_word, np.int32))

    def initial_state(self, input_ids, beam_size: int):
        """(words left, constituents left, open constituents, last token opened one, anything
        taken) per hypothesis."""
        words = tile_for_beams(tf.reduce_sum(tf.gather(self.starts_word, input_ids), axis=1), beam_size)
        rows = tf.shape(words)[0]
        return (words, MAX_CONSTITUENTS_PER_WORD * words, tf.zeros([rows], tf.int32), tf.zeros([rows], tf.bool), tf.zeros([rows], tf.bool))

    def update(self, state, ids):
        words_left, constituents_left, depth, just_opened, started = state
        kind = tf.gather(self.token_classes, ids)
        opened = tf.cast(kind == OPEN, tf.int32)
        return (
            words_left - tf.cast(kind == WORD, tf.int32),
            constituents_left - opened,
            depth + opened - tf.cast(kind == SHUT, tf.int32),
            kind == OPEN,
            started | (kind != OTHER),
        )

    def allowed(self, state, room):
        words_left, constituents_left, depth, just_opened, started = state
        # The shortest completion after each class of token: an XX per word left, a ")" per
        # open constituent, and EOS; it must fit in the `room` left after the token.
        fits = lambda words, open_after: words + open_after + 1 <= room  # noqa: E731
        words = words_left > 0
        by_class = tf.stack(
            [
                tf.zeros_like(words),
                words & (constituents_left > 0) & ((depth > 0) | ~started) & fits(words_left, depth + 1),
                words & (depth > 0) & fits(words_left - 1, depth),
                (depth > 0) & ~just_opened & ((depth > 1) | ~words) & fits(words_left, depth - 1),
                started & (depth == 0) & ~words,
            ],
            axis=1,
        )  # [rows, 5]
        return tf.gather(by_class, self.token_classes, axis=1)

"""Decoding constrained to well-formed linearised trees over exactly the input's words.

A `beam_search.TokenFilter`: each hypothesis may take only tokens that keep it a prefix of
a tree that can still be completed within its maximum length:
  "(LABEL"  between words, while words are left, inside the root (or as the root, first),
            at most MAX_CONSTITUENTS_PER_WORD per input word in all, and at most
            MAX_OPENINGS_IN_A_ROW since the last word
  a word    the next one, inside a constituent: XX (the paper's linearisation), or, with
            `copy_words`, the next word's own pieces, copied from the source, in order
  ")"       between words, when a constituent is open and not empty; the root only after
            the last word; with `closing_labels`, ")LABEL" of the innermost open one only
  EOS       once the root is closed and every word is placed
So every finished hypothesis is a tree over the input's words, at most 5 tokens per word
(plus the pieces of copied words) long, and the search spends its beam on trees instead of
on sequences that `restore` would have to repair (or on endless unary chains).

Token classes come from the target vocabulary's pieces: "▁)" (or "▁)LABEL"), "▁(LABEL"
and, without `copy_words`, "▁XX" (a label that the vocabulary splits into several pieces
cannot be produced). Words are the source's word-initial ("▁...") pieces and the pieces after them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from t2t_keras.decoding.beam_search import tile_for_beams
from t2t_keras.parsing.trees import PLACEHOLDER, is_bracket, is_closing
from t2t_keras.token_ids import EOS_ID, PAD_ID

WORD_START = "\u2581"  # SentencePiece's word-boundary mark
OTHER, OPEN, SHUT, END = range(4)  # token classes; OTHER only as the expected next word piece
# A tree over n words has at most n - 1 branching constituents; with unary chains the
# NLTK sample's training trees reach 1.5 per word.
MAX_CONSTITUENTS_PER_WORD = 2
# Constituents opened without a word between them: the NLTK sample's training trees open at
# most 6 in a row (POS tags aside), its dev trees 5. Without this bound a model trained on
# them spent the per-word budget up front on long sentences ("(S (S (NP (NP (INTJ ...", runs
# of up to 101), which no tree of the treebank does.
MAX_OPENINGS_IN_A_ROW = 6


def target_token_classes(vocabulary) -> np.ndarray:
    """The class of every target token: OPEN ("▁(LABEL"), SHUT ("▁)" or "▁)LABEL"), END
    (EOS) or OTHER."""
    pieces = vocabulary.pieces(range(vocabulary.size))
    classes = np.full(len(pieces), OTHER, np.int32)
    for token, piece in enumerate(pieces):
        bracket = piece[1:] if piece.startswith(WORD_START) else ""
        if is_closing(bracket):
            classes[token] = SHUT
        elif is_bracket(bracket):
            classes[token] = OPEN
    classes[EOS_ID] = END
    return classes


def bracket_labels(pieces: list[str], classes: np.ndarray) -> np.ndarray:
    """A number per label for every "▁(LABEL" and "▁)LABEL" token (the same for both
    brackets of a label), -1 for every other token, the unlabelled "▁)" included; `classes`
    are the pieces' `target_token_classes`."""
    numbers: dict[str, int] = {}
    labels = np.full(len(pieces), -1, np.int32)
    for token, (piece, kind) in enumerate(zip(pieces, classes)):
        if kind in (OPEN, SHUT) and len(piece) > 2:
            labels[token] = numbers.setdefault(piece[2:], len(numbers))
    return labels


class TreeFilter:
    """The parsing TokenFilter for a problem's (source, target) `Vocabularies`.

    Args:
      vocabularies: the problem's `Vocabularies`.
      copy_words: targets spell the words themselves (one shared vocabulary) instead of XX.
      closing_labels: constituents close with ")LABEL", which must name the innermost open
        one (the plain ")" is then never taken).
    """

    def __init__(self, vocabularies, copy_words: bool = False, closing_labels: bool = False):
        pieces = vocabularies.target.pieces(range(vocabularies.target.size))
        classes = target_token_classes(vocabularies.target)
        self.copy_words = copy_words
        self.closing_labels = closing_labels
        self.placeholder = None if copy_words else pieces.index(WORD_START + PLACEHOLDER) if WORD_START + PLACEHOLDER in pieces else -1
        if not {OPEN, SHUT} <= set(classes.tolist()) or self.placeholder == -1:
            raise ValueError("TreeFilter: the target vocabulary has no single pieces for '(LABEL', ')' and the words.")
        # (control pieces such as "</s>" and byte pieces "<0x41>" do not start with the mark)
        starts_word = [piece.startswith(WORD_START) for piece in vocabularies.source.pieces(range(vocabularies.source.size))]
        self.vocab_size = len(pieces)
        self.token_classes = tf.constant(classes)
        self.labels = tf.constant(bracket_labels(pieces, classes))
        self.is_closing = tf.constant(classes == SHUT)
        self.starts_word = tf.constant(np.asarray(starts_word))

    def initial_state(self, input_ids, beam_size: int):
        """Per hypothesis: (the word tokens to place [rows, L], whether each starts a word,
        how many, how many are placed, constituents left, open constituents, last token
        opened one, anything taken, constituents opened since the last word, and with
        `closing_labels` the label of every open constituent, outermost first [rows, 2L + 1]:
        the budget of 2 constituents a word bounds the depth)."""
        real = (input_ids != PAD_ID) & (input_ids != EOS_ID)
        length = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
        starts = tf.gather(self.starts_word, input_ids) & real
        if self.copy_words:
            expected, boundary = tf.where(real, input_ids, PAD_ID), starts | ~real
        else:  # one XX per word, each a word of its own
            length = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
            expected = tf.where(tf.sequence_mask(length, tf.shape(input_ids)[1]), self.placeholder, PAD_ID)
            boundary = tf.ones_like(starts)
        # A sentinel column: past the last word only brackets and EOS remain.
        expected = tf.pad(expected, [[0, 0], [0, 1]], constant_values=PAD_ID)
        boundary = tf.pad(boundary, [[0, 0], [0, 1]], constant_values=True)
        words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
        rows = tf.shape(input_ids)[0] * beam_size
        tiled = [tile_for_beams(t, beam_size) for t in (expected, boundary, length, MAX_CONSTITUENTS_PER_WORD * words)]
        max_depth = MAX_CONSTITUENTS_PER_WORD * tf.shape(input_ids)[1] + 1 if self.closing_labels else 0
        return (*tiled, tf.zeros([rows], tf.int32), tf.zeros([rows], tf.int32), tf.zeros([rows], tf.bool), tf.zeros([rows], tf.bool), tf.zeros([rows], tf.int32),
                tf.fill([rows, max_depth], -1))

    def update(self, state, ids):
        expected, boundary, length, constituents_left, placed, depth, just_opened, started, in_a_row, open_labels = state
        kind = tf.gather(self.token_classes, ids)
        placed_word = tf.equal(ids, tf.gather(expected, placed, batch_dims=1)) & (placed < length)
        opened = tf.cast(kind == OPEN, tf.int32)
        if self.closing_labels:  # an opening's label goes on top of the stack (at the old depth)
            on_top = tf.one_hot(depth, tf.shape(open_labels)[1], on_value=True, off_value=False) & (kind == OPEN)[:, None]
            open_labels = tf.where(on_top, tf.gather(self.labels, ids)[:, None], open_labels)
        return (
            expected, boundary, length,
            constituents_left - opened,
            placed + tf.cast(placed_word, tf.int32),
            depth + opened - tf.cast(kind == SHUT, tf.int32),
            kind == OPEN,
            started | (kind != OTHER) | placed_word,
            tf.where(placed_word, 0, in_a_row + opened),
            open_labels,
        )

    def allowed(self, state, room):
        expected, boundary, length, constituents_left, placed, depth, just_opened, started, in_a_row, open_labels = state
        left = length - placed  # word tokens still to place
        between = tf.gather(boundary, placed, batch_dims=1)  # brackets go only between words
        next_starts_word = between & (left > 0)
        # The shortest completion after each kind of token: the word tokens left, a ")" per
        # open constituent, and EOS; it must fit in the `room` left after the token.
        fits = lambda tokens, open_after: tokens + open_after + 1 <= room  # noqa: E731
        by_class = tf.stack(
            [
                tf.zeros_like(between),
                between & (left > 0) & (constituents_left > 0) & (in_a_row < MAX_OPENINGS_IN_A_ROW)
                & ((depth > 0) | ~started) & fits(left, depth + 1),
                between & (depth > 0) & ~just_opened & ((depth > 1) | (left == 0)) & fits(left, depth - 1),
                started & (depth == 0) & (left == 0),
            ],
            axis=1,
        )  # [rows, 4]
        allowed = tf.gather(by_class, self.token_classes, axis=1)
        if self.closing_labels:
            innermost = tf.gather(open_labels, tf.maximum(depth - 1, 0), batch_dims=1)
            allowed &= ~self.is_closing[None, :] | tf.equal(self.labels[None, :], innermost[:, None])
        word_ok = (left > 0) & ((depth > 0) | ~next_starts_word) & fits(left - 1, depth)
        next_word = tf.one_hot(tf.gather(expected, placed, batch_dims=1), self.vocab_size, on_value=True, off_value=False)
        return allowed | (next_word & word_ok[:, None])

"""Terms that must appear: lexically constrained beam search by dynamic beam allocation (Post &
Vilar, 2018), in the graph.

Each sentence has M constraints, each a sequence of target pieces (`constraint_ids` [B, M, L],
`constraint_lengths` [B, M]; length 0 pads). Every hypothesis carries a `ConstraintState`: which
constraints it has met, the one it is in the middle of and how far. At each step a hypothesis's
candidates are its best next pieces (as without constraints) and the pieces that advance an
unmet constraint (its next piece, or the first piece of each unmet one), so a constraint the
model finds unlikely is still tried. The candidates are grouped into banks by the constraint
pieces they have met, and the beam is filled round-robin: the best of each bank (the bank
nearest to done first), then the second best of each, ... (`bank_choice`); Post & Vilar divide
the beam evenly between banks and hand a bank's unused share to the others, which comes to the
same choices when the banks are full. A hypothesis ends (EOS) only once every constraint is
met, except at its sentence's maximum length, where it ends anyway: such a hypothesis ranks
below every one that met all (`unmet_key`), and the interfaces name what it misses.

A sentence with constraints is ranked with a length penalty's alpha of at most MAX_ALPHA. A
larger alpha rewards length itself: on the demo model (alpha 2.6) exact search, which follows
the ranking past the point where the default stop ends it, made outputs 2.6x longer and val
BLEU 37.8 -> 13.4, and a constrained search must go past where the model would have ended (to
fit a term in). With terms from the references, val BLEU was 35.9 at alpha 2.6, 40.0 at 2.0,
43.8 at 1.4, 43.7 at 1.0 (37.0-37.8 unconstrained).

A constraint's pieces are its text as the tokenizer spells it ("Köter" -> "▁K", "öter"): a
word start first, so it never begins inside another word; after its last piece, the next may
not continue that word (`continues_word`: "Hund" is not met by "Hunde").
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from t2t_keras.kernels.beam_candidates import NEG_INF

MAX_ALPHA = 1.0  # the most length penalty a constrained sentence is ranked with (see above)
UNMET_OFFSET = 1.0e4  # below every finished score that met all (scores are a few tens at most), far above NEG_INF


class ConstraintState(NamedTuple):
    """Per hypothesis ([A, K, ...], or [A, K, X, ...] for X candidates each)."""

    met: tf.Tensor  # [..., M] bool: the constraints met (padding ones count as met)
    current: tf.Tensor  # [...] int32: the constraint in progress, -1 none
    position: tf.Tensor  # [...] int32: its pieces taken so far
    closing: tf.Tensor  # [...] bool: the last piece completed a constraint (the next may not continue its word)


def initial_state(lengths, beams: int) -> ConstraintState:
    """Nothing met yet (but padding), for `beams` hypotheses of each sentence: `lengths` [A, M]."""
    searching = tf.shape(lengths)[0]
    met = tf.tile((lengths == 0)[:, None, :], [1, beams, 1])
    zeros = tf.zeros([searching, beams], tf.int32)
    return ConstraintState(met, zeros - 1, zeros, tf.zeros([searching, beams], tf.bool))


def progress(state: ConstraintState, lengths):
    """int32 [A, N]: the constraint pieces each hypothesis (of a [A, N, ...] state) has taken,
    its bank: those of the met constraints and of the one in progress. `lengths` [A, M]."""
    met = tf.reduce_sum(tf.where(state.met, lengths[:, None, :], 0), axis=-1)
    return met + tf.where(state.current >= 0, state.position, 0)


def all_met(state: ConstraintState):
    return tf.reduce_all(state.met, axis=-1)


def advancing_pieces(state: ConstraintState, ids, lengths):
    """(tokens [A, K, M], valid [A, K, M]): for each hypothesis and constraint m, the piece that
    advances m: its next piece if m is in progress, its first if no constraint is in progress
    and m is unmet."""
    in_progress = state.current >= 0  # [A, K]
    width = tf.shape(ids)[2]
    current_ids = tf.gather(ids, tf.maximum(state.current, 0), batch_dims=1)  # [A, K, L]
    next_piece = tf.gather(current_ids, tf.minimum(state.position, width - 1), batch_dims=2)  # [A, K]
    first_pieces = tf.broadcast_to(ids[:, None, :, 0], tf.shape(state.met))  # [A, K, M]
    is_current = tf.equal(tf.range(tf.shape(state.met)[-1])[None, None, :], state.current[:, :, None])
    tokens = tf.where(in_progress[:, :, None], next_piece[:, :, None], first_pieces)
    valid = tf.where(in_progress[:, :, None], is_current, ~state.met & (lengths > 0)[:, None, :])
    return tokens, valid


def advance(state: ConstraintState, tokens, preferred, ids, lengths) -> ConstraintState:
    """Each hypothesis's state after each of its X candidate `tokens` [A, K, X]: [A, K, X, ...].

    A token that is the next piece of the constraint in progress advances it (meeting it at its
    last piece); any other ends that attempt and, if it is the first piece of an unmet
    constraint, starts that one: constraint `preferred` [A, K, X] if it is one of those (the
    candidate `advancing_pieces` gave for it), else the first of them. `ids` [A, M, L],
    `lengths` [A, M]."""
    met = state.met[:, :, None, :]  # [A, K, 1, M]
    current, position = state.current[:, :, None], state.position[:, :, None]  # [A, K, 1]
    count, width = tf.shape(ids)[1], tf.shape(ids)[2]
    current_ids = tf.gather(ids, tf.maximum(state.current, 0), batch_dims=1)  # [A, K, L]
    current_length = tf.gather(lengths, tf.maximum(state.current, 0), batch_dims=1)[:, :, None]  # [A, K, 1]
    expected = tf.gather(current_ids, tf.minimum(state.position, width - 1), batch_dims=2)[:, :, None]
    continuing = (current >= 0) & tf.equal(tokens, expected)  # [A, K, X]
    completes = continuing & tf.equal(position + 1, current_length)

    startable = tf.equal(tokens[..., None], ids[:, None, None, :, 0]) & ~met & (lengths > 0)[:, None, None, :]  # [A, K, X, M]
    columns = tf.range(count)
    prefer = tf.reduce_any(startable & tf.equal(columns, preferred[..., None]), axis=-1)
    first_startable = tf.argmax(tf.cast(startable, tf.int32), axis=-1, output_type=tf.int32)
    started = tf.where(prefer, preferred, tf.where(tf.reduce_any(startable, axis=-1), first_startable, -1))
    started = tf.where(continuing, -1, started)
    started_length = tf.gather(lengths, tf.maximum(started, 0), batch_dims=1)  # [A, K, X]
    started_whole = (started >= 0) & tf.equal(started_length, 1)  # a one-piece constraint: met at once

    newly_met = (tf.equal(columns, current[..., None]) & completes[..., None]) | (
        tf.equal(columns, started[..., None]) & started_whole[..., None])
    next_current = tf.where(continuing, tf.where(completes, -1, current),
                            tf.where((started >= 0) & ~started_whole, started, -1))
    next_position = tf.where(continuing, tf.where(completes, 0, position + 1),
                             tf.where((started >= 0) & ~started_whole, 1, 0))
    return ConstraintState(met | newly_met, next_current, next_position, completes | started_whole)


def gathered(state: ConstraintState, indices) -> ConstraintState:
    """The states of the candidates at `indices` [A, C] of a [A, N, ...] state."""
    return ConstraintState(*(tf.gather(t, indices, batch_dims=1) for t in state))


def flattened(state: ConstraintState, searching, count) -> ConstraintState:
    """[A, K, X, ...] -> [A, K * X, ...]."""
    return ConstraintState(tf.reshape(state.met, [searching, count, -1]),
                           *(tf.reshape(t, [searching, count]) for t in state[1:]))


def same(a: ConstraintState, b: ConstraintState):
    """Where two broadcastable states are equal."""
    return (tf.reduce_all(tf.equal(a.met, b.met), axis=-1) & tf.equal(a.current, b.current)
            & tf.equal(a.position, b.position) & tf.equal(a.closing, b.closing))


def bank_choice(log_probs, banks, k: int):
    """int32 [A, k]: the candidates (of [A, N], NEG_INF: none) that fill the beam, round-robin
    over the banks: the best of each bank from the highest down, then the second best of each,
    ...; then ordered by log P, best first (what the search's stopping rule reads)."""
    count = tf.shape(log_probs)[1]
    by_score = tf.argsort(log_probs, axis=1, direction="DESCENDING", stable=True)
    by_bank = tf.gather(by_score, tf.argsort(tf.gather(-banks, by_score, batch_dims=1), axis=1, stable=True), batch_dims=1)
    sorted_banks = -tf.gather(banks, by_bank, batch_dims=1)  # ascending
    rank = tf.range(count)[None, :] - tf.searchsorted(sorted_banks, sorted_banks, side="left")  # within its bank
    highest = tf.reduce_max(banks, axis=1, keepdims=True)
    key = tf.cast(rank * (highest + 1) + (highest + sorted_banks), tf.float32)  # rank, then bank from the top
    valid = tf.gather(log_probs, by_bank, batch_dims=1) > NEG_INF / 2
    key = tf.where(valid, key, tf.cast(count * (highest + 1), tf.float32) + tf.cast(tf.range(count), tf.float32)[None, :])
    chosen = tf.gather(by_bank, tf.math.top_k(-key, k=k).indices, batch_dims=1)
    order = tf.argsort(tf.gather(log_probs, chosen, batch_dims=1), axis=1, direction="DESCENDING", stable=True)
    return tf.gather(chosen, order, batch_dims=1)


def unmet_key(scores, unmet):
    """What finished hypotheses rank by: their score, below every one that met all if `unmet`."""
    return tf.where(unmet, scores - UNMET_OFFSET, scores)

"""Beam search over a step function, as in the paper (section 6.1) and tensor2tensor.

The search is a pure TensorFlow function: `step_fn(ids, index, state, sentence_state) ->
(logits, state)` gives next-token logits for the `ids` [batch * beam] fed at position
`index`; `state` is any nest of tensors whose leading dimension is batch * beam (the model's
growing key/value cache, or the token buffer of an uncached step function), and
`sentence_state` one whose leading dimension is batch (the encoder output), for the sentences
still searching. The same graph runs eagerly, inside tf.function and in an exported SavedModel.

Hypotheses are kept in two sets of `beam_size` each: alive (still growing) and finished
(ended with EOS), with 2 * beam_size candidates drawn per step so that finishing
hypotheses never starve the alive set. Finished hypotheses are scored with the GNMT length
penalty: log P(Y) / ((5 + |Y|) / 6)^alpha, |Y| counting EOS. Each sentence stops at its own
maximum length (input length + extra_length: only EOS is allowed at the last position), and
earlier once its search is settled: by default when its best finished hypothesis (or its
n-th best, for n-best lists) beats what its best alive one would score if it ended at the
next step (as OpenNMT and CTranslate2 stop once the best beam has ended); with `exact`, only
when no alive hypothesis could beat the worst of its finished ones even at the maximum length
(tensor2tensor's bound, which makes the n-best list the K best the beam can reach, but with a
large alpha keeps searching long after the outcome is clear: 2.6x the steps on the demo model
at alpha 1.4). The default stop does not wait for the longer hypotheses a large alpha can
still favour: on four demo models at alpha 1.4 its outputs were 2.5-4% shorter than exact
search's and 0.0-0.15 val BLEU lower; at the demo's alpha 2.0 it scored level with exact
search at 1.4 or up to 0.23 above it.
Beam size 1 is greedy search on the same loop.

Every per-step cost follows the length decoded so far, never the maximum length: the
hypotheses grow by one column per step, and the top 2 * beam_size of each hypothesis's
vocabulary are chosen before the beams of a sentence compete (the same candidates as one
top-k over all beam_size * vocabulary extensions, at a fraction of the work).

A `TokenFilter` restricts which tokens a hypothesis may take next (parsing: only
well-formed trees over the input's words); scores stay the model's log-probabilities,
normalised over the whole vocabulary.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

import tensorflow as tf

from t2t_keras.decoding import constraints
from t2t_keras.decoding.controls import SearchControls, step_allowed
from t2t_keras.decoding.kernel_choices import GRAPH_ONLY, DecodeKernels
from t2t_keras.kernels.beam_candidates import NEG_INF, masked_by_sentence, row_candidates
from t2t_keras.kernels.softmax import log_normalizers_at
from t2t_keras.kernels.top_k import top_k_rows
from t2t_keras.token_ids import PAD_ID, START_ID


class BeamSearchResult(NamedTuple):
    ids: tf.Tensor  # [batch, beam, steps] int32: generated tokens, best first; EOS then 0s
    scores: tf.Tensor  # [batch, beam] float32: length-penalised log-probabilities
    lengths: tf.Tensor  # [batch, beam] int32: tokens up to and including EOS


class TokenFilter(Protocol):
    """Which tokens each hypothesis may take next. Its state is a nest of tensors with leading
    dimension batch * beam that beam search carries and reorders with the hypotheses."""

    def initial_state(self, input_ids, beam_size: int):
        """The state before any token, one row per hypothesis (B * K), from the source ids [B, S]."""

    def update(self, state, ids):
        """The state after each hypothesis took `ids` [B * K] (never called with the start token)."""

    def allowed(self, state, room):
        """bool [B * K, V]: the tokens each hypothesis may take next, when at most `room` [B * K]
        tokens may follow that one (room 0: the last position, where only EOS ends in time)."""


def length_penalty(length, alpha: float):
    """GNMT: ((5 + length) / 6) ** alpha."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(
    step_fn: Callable,
    initial_state,
    batch_size,
    beam_size: int,
    alpha: float,
    max_lengths,
    eos_id: int,
    start_id: int = START_ID,
    token_filter: TokenFilter | None = None,
    filter_state=None,
    vocabulary=None,
    sentence_groups=None,
    column_mask=None,
    exact: bool = False,
    n_best: int = 1,
    sentence_state=(),
    kernels: DecodeKernels = GRAPH_ONLY,
    min_length: int = 0,
    controls: SearchControls | None = None,
    continues_word=None,
) -> BeamSearchResult:
    """Returns the `beam_size` best hypotheses per sentence.

    A sentence leaves the search once it is settled: the step then runs on the A sentences
    still searching only (their hypotheses' rows of `initial_state`, `filter_state` and
    `sentence_state`), so the sentences that settle early stop costing, as CTranslate2 drops
    its finished batch entries.

    Args:
      step_fn: (ids [A*K] int32, index scalar int32, state, sentence_state) -> (logits [A*K, V]
        of a float dtype, state), over the hypotheses of the A sentences still searching.
      initial_state: nest of tensors with leading dimension B*K (already tiled per beam), each
        reordered with its hypotheses (what every hypothesis shares, such as the encoder
        output, belongs in step_fn's closure or in `sentence_state`).
      batch_size: B (may be a tensor).
      beam_size: K (a Python int).
      alpha: length penalty exponent; 0 = raw log-probabilities.
      max_lengths: [B] int32, the most tokens (EOS included) each sentence may generate.
      eos_id: the end-of-sequence token.
      start_id: the token fed at position 0.
      token_filter: restricts the next tokens (`TokenFilter`); `filter_state` is its
        `initial_state`.
      vocabulary: int32 [G, V'] token ids, each row in ascending order, one per logits
        column, EOS among them in the same column of every row (a token may repeat in columns
        `column_mask` masks): the logits of sentence b's hypotheses cover only the tokens of
        row `sentence_groups[b]` (a `Shortlist`'s groups), and log-probabilities are
        normalised over them; None: the columns are the whole vocabulary.
      sentence_groups: int32 [B], each sentence's row of `vocabulary` (with `vocabulary`).
      column_mask: [B, V'] bool, the columns each sentence may take (its own shortlist among
        its row of `vocabulary`): its logits are NEG_INF elsewhere, before they are
        normalised; None: all.
      exact: search until no alive hypothesis could beat a finished one at its maximum
        length (the n-best list exact); default: until the `n_best`-th best finished one
        beats the best alive one at its current length (see the module's docstring).
      n_best: without `exact`, the hypotheses per sentence that are final when it stops (the
        first n_best returned; a slot after them that nothing finished in is empty: length
        0, score NEG_INF).
      sentence_state: nest of tensors with leading dimension B that step_fn reads (one row per
        sentence, e.g. the encoder output's keys and values); never changed by the search
        but to drop the rows of settled sentences.
      kernels: the kernels of the step's work over the vocabulary (`kernel_choices.DecodeKernels`):
        `beam_candidates` (one native kernel where they were built, for `row_candidates`) and
        `top_k` (with a token filter): the same tokens, log-probabilities equal to float32
        rounding, whichever runs; native ones only in a graph run in this process, never an
        exported one. With native beam candidates `step_fn`'s logits may be bfloat16: they are
        read as they are.
      min_length: no hypothesis ends before it has this many tokens (EOS included): EOS is
        not a candidate before then (its probability still counts in the normaliser, as
        CTranslate2's min_decoding_length and fairseq's --min-len); a sentence whose maximum
        length is smaller ends at its maximum.
      controls: each sentence's prefix and avoided terms (`controls.SearchControls`, [B, ...]
        each): they restrict the tokens a hypothesis may take (`controls.step_allowed`); its
        scores stay the model's log-probabilities over the whole vocabulary, so a forced
        prefix's pieces count in them. With its constraint_ids, the terms each output must
        hold (`constraints`: dynamic beam allocation; a sentence's hypotheses that cannot meet
        them all by its maximum length end there, ranked below any that did).
      continues_word: [V] bool, the pieces that continue a word (no word-start mark, a letter
        or digit first): none may follow a constraint's last piece (with constraints).
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"beam_search: n_best={n_best} must be 1 to beam_size ({beam_size}).")
    K = beam_size
    max_lengths = tf.cast(max_lengths, tf.int32)
    eos_column = eos_id if vocabulary is None else tf.searchsorted(vocabulary[0], [eos_id])[0]
    max_length = tf.maximum(tf.reduce_max(max_lengths), 0)  # 0 for an empty batch
    if token_filter is None:
        filter_state = ()
    if column_mask is None:
        column_mask = ()
    if vocabulary is None:
        sentence_groups = ()
    steering = controls is not None
    restricted = token_filter is not None or steering
    constraining = steering and not isinstance(controls.constraint_ids, tuple)
    if controls is None:
        controls = ()

    # Every sentence's K best finished hypotheses, by score, final once the sentence settles.
    finished_seqs = tf.fill([batch_size, K, 1], PAD_ID)
    finished_scores = tf.fill([batch_size, K], NEG_INF)
    finished_flags = tf.zeros([batch_size, K], tf.bool)
    # The sentences still searching (indices into the batch) and their alive hypotheses; only
    # the first beam is live at the start, so the K beams do not all pick the same token.
    active = tf.range(batch_size)
    alive_seqs = tf.fill([batch_size, K, 1], start_id)
    alive_log_probs = tf.tile(tf.constant([[0.0] + [NEG_INF] * (K - 1)]), [batch_size, 1])

    def score_of(log_probs, length, controls, prefix_log_probs):
        """What a hypothesis of `length` tokens (EOS included; scalar or [A, 1]) ranks by: its
        log P / ((5 + length) / 6) ** alpha; after a forced prefix, the prefix's log P plus the
        rest's over the rest's length (a prefix is given, not chosen: normalised with the rest,
        its low probability would make longer continuations look better as alpha grows); a
        sentence with terms that must appear with alpha at most `constraints.MAX_ALPHA`."""
        if not steering:
            return log_probs / length_penalty(length, alpha)
        given = controls.prefix_lengths[:, None]
        prefix = prefix_log_probs[:, None]
        sentence_alpha = alpha
        if constraining and alpha > constraints.MAX_ALPHA:
            has_terms = tf.reduce_any(controls.constraint_lengths > 0, axis=1, keepdims=True)
            sentence_alpha = tf.where(has_terms, constraints.MAX_ALPHA, alpha)
        return (log_probs - prefix) / length_penalty(tf.maximum(length - given, 0), sentence_alpha) + prefix

    def settled(generated, alive_log_probs, scores, flags, max_lengths, controls, prefix_log_probs):
        """[A] bool: which of the searching sentences are settled once `generated` tokens are."""
        finished = tf.where(flags, scores, NEG_INF)
        if exact:  # the best alive hypothesis could no longer enter the finished set
            best_possible = score_of(alive_log_probs[:, :1], max_lengths[:, None], controls, prefix_log_probs)[:, 0]
            to_beat = tf.reduce_min(finished, axis=1)
        else:  # the best alive hypothesis ending next would not beat the n_best-th finished one
            best_possible = score_of(alive_log_probs[:, :1], generated + 1, controls, prefix_log_probs)[:, 0]
            to_beat = finished[:, n_best - 1]  # finished scores are kept in descending order
        return (generated >= max_lengths) | (best_possible <= to_beat)

    def drop_settled(done, rows, active, alive_seqs, alive_log_probs, states):
        """The search without the sentences `done` [A]; `rows` [A, K]: each kept hypothesis's
        row in the per-hypothesis state (its parent's, after a step)."""
        keep = tf.cast(tf.where(~done)[:, 0], tf.int32)
        state, filter_state, *per_sentence = states
        hypothesis_rows = tf.reshape(tf.gather(rows, keep), [-1])
        state, filter_state = tf.nest.map_structure(lambda t: tf.gather(t, hypothesis_rows), (state, filter_state))
        per_sentence = tuple(per_sentence)
        if tf.nest.flatten(per_sentence):  # gathered only when a sentence leaves (a few times a batch)
            per_sentence = tf.cond(tf.reduce_any(done), lambda: tf.nest.map_structure(lambda t: tf.gather(t, keep), per_sentence),
                                   lambda: per_sentence)
        return (tf.gather(active, keep), tf.gather(alive_seqs, keep), tf.gather(alive_log_probs, keep),
                (state, filter_state, *per_sentence))

    def constrained_candidates(alive_log_probs, row_log_probs, row_tokens, logits, log_normalizers, allowed_tokens,
                               at_limit, met, controls, sentence_groups):
        """(log P [A, N], tokens [A, N], beams [A, N], constraint states [A, N, ...], whether
        among the 2K best extensions [A, N]) of every candidate: each hypothesis's row_k best
        extensions and the pieces that advance its unmet constraints (where allowed, never at
        the last position), one of two that reach the same state dropped."""
        ids, lengths = controls.constraint_ids, controls.constraint_lengths
        searching, count = tf.shape(row_log_probs)[0], tf.shape(ids)[1]
        tokens, valid = constraints.advancing_pieces(met, ids, lengths)  # [A, K, M]
        flat_tokens = tf.reshape(tokens, [searching * K, count])
        valid = tf.reshape(valid, [searching * K, count]) & tf.gather(allowed_tokens, flat_tokens, batch_dims=1)
        columns = flat_tokens
        if vocabulary is not None:  # the tokens' columns in their sentence's row (a shortlist's)
            rows = tf.gather(vocabulary, tf.repeat(sentence_groups, K))
            columns = tf.minimum(tf.searchsorted(rows, flat_tokens), tf.shape(rows)[1] - 1)
            valid &= tf.equal(tf.gather(rows, columns, batch_dims=1), flat_tokens)
        piece_log_probs = tf.gather(logits, columns, batch_dims=1) - log_normalizers
        piece_log_probs = tf.reshape(tf.where(valid & ~at_limit, piece_log_probs, NEG_INF), [searching, K, count])
        row_met = constraints.advance(met, row_tokens, tf.fill(tf.shape(row_tokens), -1), ids, lengths)
        piece_met = constraints.advance(met, tokens, tf.broadcast_to(tf.range(count), tf.shape(tokens)), ids, lengths)
        duplicate = tf.reduce_any(
            tf.equal(row_tokens[:, :, :, None], tokens[:, :, None, :]) & (row_log_probs > NEG_INF / 2)[:, :, :, None] & constraints.same(
                constraints.ConstraintState(*(t[:, :, :, None] for t in row_met)),
                constraints.ConstraintState(*(t[:, :, None] for t in piece_met))), axis=2)  # [A, K, M]
        piece_log_probs = tf.where(duplicate, NEG_INF, piece_log_probs)
        per_hypothesis = tf.shape(row_tokens)[2] + count
        extensions = tf.reshape(alive_log_probs[:, :, None] + row_log_probs, [searching, -1])
        best = tf.math.top_k(extensions, k=2 * K).indices  # what the search without terms chooses from
        among_best = tf.reduce_any(tf.equal(tf.range(tf.shape(extensions)[1])[None, :, None], best[:, None, :]), axis=2)
        among_best = tf.concat([tf.reshape(among_best, tf.shape(row_log_probs)), tf.zeros_like(piece_log_probs, tf.bool)], 2)
        log_probs = tf.reshape(alive_log_probs[:, :, None] + tf.concat([row_log_probs, piece_log_probs], axis=2),
                               [searching, K * per_hypothesis])
        all_tokens = tf.reshape(tf.concat([row_tokens, tokens], axis=2), [searching, K * per_hypothesis])
        all_met = constraints.ConstraintState(*(tf.concat([a, b], axis=2) for a, b in zip(row_met, piece_met)))
        beams = tf.range(K * per_hypothesis)[None, :] // per_hypothesis
        return (log_probs, all_tokens, tf.tile(beams, [searching, 1]),
                constraints.flattened(all_met, searching, K * per_hypothesis),
                tf.reshape(among_best, [searching, K * per_hypothesis]))

    def condition(index, active, *_):
        return (index < max_length) & (tf.size(active) > 0)

    def body(index, active, alive_seqs, alive_log_probs, finished_seqs, finished_scores, finished_flags, states):
        state, filter_state, sentence_state, column_mask, sentence_groups, controls, prefix_log_probs, met = states
        searching = tf.shape(active)[0]
        active_max_lengths = tf.gather(max_lengths, active)
        ids = tf.reshape(alive_seqs[:, :, -1], [-1])
        logits, state = step_fn(ids, index, state, sentence_state)
        room = tf.repeat(active_max_lengths, K) - (index + 1)  # tokens that may still follow the one chosen now
        # Each hypothesis's 2K best next tokens (all of a smaller vocabulary) and their
        # log-probabilities, ranked by logit (the same order as by log-probability within a
        # row); at a sentence's last position only EOS.
        # (one more with min_length, so that 2K remain when EOS, too early, is among them)
        row_k = 2 * K + (min_length > 0)
        row_k = row_k if logits.shape[-1] is None else min(row_k, logits.shape[-1])
        mask = None if isinstance(column_mask, tuple) else column_mask
        if not restricted:
            row_log_probs, row_tokens, eos_log_probs = row_candidates(logits, row_k, eos_column, kernels.beam_candidates == "native", mask)
            eos_log_probs = eos_log_probs[:, None]
        else:
            logits = masked_by_sentence(tf.cast(logits, tf.float32), mask)
            allowed = None
            if token_filter is not None:
                filter_state = tf.cond(index > 0, lambda: token_filter.update(filter_state, ids), lambda: filter_state)
                allowed = token_filter.allowed(filter_state, room)
            if steering:
                steered = step_allowed(controls, alive_seqs, index, tf.shape(controls.completion)[1])
                allowed = steered if allowed is None else allowed & steered
            if constraining:  # EOS once all are met; no piece continuing a constraint's last word
                eos = tf.equal(tf.range(tf.shape(allowed)[1]), eos_id)[None, :]
                allowed &= ~(eos & ~tf.reshape(constraints.all_met(met), [-1, 1]))
                if continues_word is not None:
                    allowed &= ~(tf.reshape(met.closing, [-1, 1]) & continues_word[None, :])
            allowed_tokens = allowed
            if vocabulary is not None:
                allowed = tf.gather(allowed, tf.gather(vocabulary, tf.repeat(sentence_groups, K)), batch_dims=1)
            row_logits, row_tokens = top_k_rows(tf.where(allowed, logits, NEG_INF), row_k, kernels.top_k == "native")
            log_normalizers, _ = log_normalizers_at(logits, tf.argmax(logits, axis=-1, output_type=tf.int32))
            log_normalizers = log_normalizers[:, None]
            row_log_probs = row_logits - log_normalizers
            eos_log_probs = logits[:, eos_column : eos_column + 1] - log_normalizers
        if vocabulary is not None:  # columns -> token ids
            row_offsets = tf.repeat(sentence_groups, K)[:, None] * tf.shape(vocabulary)[1]
            row_tokens = tf.gather(tf.reshape(vocabulary, [-1]), row_offsets + row_tokens)
        if min_length > 0:
            too_early = (index + 1 < min_length) & tf.equal(row_tokens, eos_id)
            row_log_probs = tf.where(too_early, NEG_INF, row_log_probs)
        at_limit = (room <= 0)[:, None]
        first = tf.range(row_k)[None, :] == 0
        row_log_probs = tf.where(at_limit, tf.where(first, eos_log_probs, NEG_INF), row_log_probs)
        row_tokens = tf.where(at_limit, eos_id, row_tokens)
        row_log_probs = tf.reshape(row_log_probs, [searching, K, row_k])

        if constraining:  # every extension and each hypothesis's constraint pieces; the beam filled bank by bank
            candidate_log_probs, candidate_tokens, candidate_beams, candidate_met, among_best = constrained_candidates(
                alive_log_probs, row_log_probs, tf.reshape(row_tokens, [searching, K, row_k]), logits,
                log_normalizers, allowed_tokens, at_limit, met, controls, sentence_groups)
            # A sentence without terms ends hypotheses as below (an EOS of the 2K best); one with terms
            # by any EOS of a hypothesis that met them (val BLEU 42.1 -> 43.9 on the demo model).
            has_terms = tf.reduce_any(controls.constraint_lengths > 0, axis=1, keepdims=True)
            candidate_finished = tf.equal(candidate_tokens, eos_id) & (among_best | has_terms)
            banks = constraints.progress(candidate_met, controls.constraint_lengths)
            alive_choice = constraints.bank_choice(tf.where(tf.equal(candidate_tokens, eos_id), NEG_INF, candidate_log_probs),
                                                   banks, K)
            alive_log_probs = tf.gather(candidate_log_probs, alive_choice, batch_dims=1)
            met = constraints.gathered(candidate_met, alive_choice)
        else:  # 2K candidates per sentence from its K * 2K extensions
            candidates = tf.reshape(alive_log_probs[:, :, None] + row_log_probs, [searching, K * row_k])
            candidate_log_probs, flat_indices = tf.math.top_k(candidates, k=2 * K)
            candidate_beams = flat_indices // row_k
            candidate_tokens = tf.gather(tf.reshape(row_tokens, [searching, K * row_k]), flat_indices, batch_dims=1)
            candidate_finished = tf.equal(candidate_tokens, eos_id)
            # Alive: the K best candidates that did not just finish.
            alive_log_probs, alive_choice = tf.math.top_k(tf.where(candidate_finished, NEG_INF, candidate_log_probs), k=K)
        candidate_seqs = tf.concat(
            [tf.gather(alive_seqs, candidate_beams, batch_dims=1), candidate_tokens[:, :, None]], axis=2
        )
        alive_seqs = tf.gather(candidate_seqs, alive_choice, batch_dims=1)
        parent_beams = tf.gather(candidate_beams, alive_choice, batch_dims=1)  # [A, K]

        # Finished: the K best of the old finished set and the candidates that just ended.
        # (a candidate grown from a masked beam or token carries ~NEG_INF and must not count)
        just_finished = candidate_finished & (candidate_log_probs > NEG_INF / 2)
        new_scores = tf.where(just_finished, score_of(candidate_log_probs, index + 1, controls, prefix_log_probs), NEG_INF)
        finished_seqs = tf.pad(finished_seqs, [[0, 0], [0, 0], [0, 1]], constant_values=PAD_ID)
        all_seqs = tf.concat([tf.gather(finished_seqs, active), candidate_seqs], axis=1)
        all_scores = tf.concat([tf.gather(finished_scores, active), new_scores], axis=1)
        all_flags = tf.concat([tf.gather(finished_flags, active), just_finished], axis=1)
        if constraining:  # one that ended at the maximum length without them all ranks below those that did
            unmet = tf.concat([tf.zeros([searching, K], tf.bool), ~constraints.all_met(candidate_met)], axis=1)
            _, choice = tf.math.top_k(constraints.unmet_key(all_scores, unmet), k=K)
            scores = tf.gather(all_scores, choice, batch_dims=1)
        else:
            scores, choice = tf.math.top_k(all_scores, k=K)
        flags = tf.gather(all_flags, choice, batch_dims=1)
        at = active[:, None]
        finished_seqs = tf.tensor_scatter_nd_update(finished_seqs, at, tf.gather(all_seqs, choice, batch_dims=1))
        finished_scores = tf.tensor_scatter_nd_update(finished_scores, at, scores)
        finished_flags = tf.tensor_scatter_nd_update(finished_flags, at, flags)

        # The hypotheses follow their parents; settled sentences leave the search, their
        # finished sets final (the default rule is a heuristic: a longer hypothesis might still
        # have entered), so a sentence decodes the same alone or in any batch.
        if steering:  # the forced path's log P, once its last piece is taken (it is the one hypothesis alive then)
            prefix_log_probs = tf.where(tf.equal(index + 1, controls.prefix_lengths), alive_log_probs[:, 0], prefix_log_probs)
        done = settled(index + 1, alive_log_probs, scores, flags, active_max_lengths, controls, prefix_log_probs)
        parent_rows = tf.range(searching)[:, None] * K + parent_beams
        active, alive_seqs, alive_log_probs, states = drop_settled(
            done, parent_rows, active, alive_seqs, alive_log_probs,
            (state, filter_state, sentence_state, column_mask, sentence_groups, controls, prefix_log_probs, met))
        return index + 1, active, alive_seqs, alive_log_probs, finished_seqs, finished_scores, finished_flags, states

    # A sentence that may generate nothing (max length 0) is settled before any step.
    first_rows = tf.range(batch_size)[:, None] * K + tf.range(K)[None, :]
    active, alive_seqs, alive_log_probs, states = drop_settled(
        max_lengths <= 0, first_rows, active, alive_seqs, alive_log_probs,
        (initial_state, filter_state, sentence_state, column_mask, sentence_groups, controls,
         tf.zeros([batch_size]) if steering else (),
         constraints.initial_state(controls.constraint_lengths, K) if constraining else ()))
    loop_vars = (tf.constant(0), active, alive_seqs, alive_log_probs, finished_seqs, finished_scores, finished_flags, states)
    shape_invariants = tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), loop_vars)
    _, _, _, _, finished_seqs, finished_scores, finished_flags, _ = tf.while_loop(
        condition, body, loop_vars, shape_invariants=shape_invariants, maximum_iterations=max_length
    )
    # Only a sentence of max length 0 ends with nothing finished: it gets the empty output,
    # scored as its alive hypotheses were at the start.
    any_finished = tf.reduce_any(finished_flags, axis=1)
    scores = tf.where(any_finished[:, None], finished_scores, tf.constant([[0.0] + [NEG_INF] * (K - 1)]))
    seqs = finished_seqs[:, :, 1:]
    eos_before = tf.cumsum(tf.cast(tf.equal(seqs, eos_id), tf.int32), axis=-1, exclusive=True)
    lengths = tf.reduce_sum(tf.cast(eos_before == 0, tf.int32), axis=-1)  # up to and including EOS
    lengths = tf.where(finished_flags, lengths, 0)  # slots nothing finished in: no tokens
    keep = tf.sequence_mask(lengths, tf.shape(seqs)[-1])
    return BeamSearchResult(tf.where(keep, seqs, PAD_ID), scores, lengths)


def search_in_parts(search: Callable, input_ids, parts: int, *per_sentence) -> BeamSearchResult:
    """`search` (source ids [b, S], then the same rows of each `per_sentence` tensor [B, ...] ->
    BeamSearchResult) over `parts` interleaved parts of the batch [B, S] (part p its rows p,
    p + parts, ...; some empty when B < parts), as independent branches of one graph, joined
    back in order (ids padded to the longest part's steps). Interleaved, the parts of a batch
    sorted by length hold sentences as long as each other's, so they end together.

    TensorFlow's inter-op threads run the branches side by side: with one thread per op
    (`system.one_thread_per_op`) each part keeps one CPU core busy with no hand-offs between
    cores inside the small ops of a decode step (docs/results/training_speed.md, "Hand-written kernels").
    The results are those of one search:
    the sentences of a batch never interact.
    """
    if parts == 1:
        return search(input_ids, *per_sentence)
    results = [search(*(t[part::parts] for t in (input_ids, *per_sentence))) for part in range(parts)]
    steps = tf.reduce_max([tf.shape(result.ids)[2] for result in results])
    padded = [
        tf.pad(result.ids, [[0, 0], [0, 0], [0, steps - tf.shape(result.ids)[2]]], constant_values=PAD_ID)
        for result in results
    ]
    rows = [tf.range(tf.shape(input_ids)[0])[part::parts] for part in range(parts)]
    return BeamSearchResult(*(tf.dynamic_stitch(rows, parts_of_field)
                              for parts_of_field in (padded, [r.scores for r in results], [r.lengths for r in results])))


def tile_for_beams(tensor, beam_size: int):
    """[B, ...] -> [B * K, ...], each row repeated K times (beam-major within a sentence)."""
    return tf.repeat(tensor, beam_size, axis=0)


def sample(
    step_fn: Callable,
    initial_state,
    seeds,
    max_lengths,
    eos_id: int,
    top_k: int = -1,
    temperature: float = 1.0,
    alpha: float = 0.0,
    samples: int = 1,
    start_id: int = START_ID,
    token_filter: TokenFilter | None = None,
    filter_state=None,
    sentence_state=(),
    min_length: int = 0,
) -> BeamSearchResult:
    """`samples` independent outputs per sentence, each token drawn from the model's next-token
    distribution (logits divided by `temperature`, restricted to the `top_k` most likely; -1:
    all), best first by log P / length penalty. The draws are a counter-based function of the
    sentence's seed, the sample's number, the position and the token (`gumbel_noise`), so a
    sentence's samples depend on its seed alone, never on the batch it is in.

    Args:
      step_fn, initial_state, sentence_state: as for `beam_search`, with B * samples rows (row
        b * samples + s is sample s of sentence b); no row is ever reordered or dropped.
      seeds: [B] int64, one seed per sentence.
      max_lengths: [B] int32, the most tokens (EOS included) each sentence may generate.
      alpha: the length penalty that orders the samples of a sentence.
      min_length: EOS is not drawn before an output has this many tokens (as for `beam_search`).
    Returns a BeamSearchResult whose scores are log P(output) / length penalty, log P under the
    model's own (untempered, untruncated) distribution.
    """
    batch_size = tf.shape(seeds)[0]
    rows = batch_size * samples
    row_seeds = tf.repeat(tf.cast(seeds, tf.int64), samples)
    streams = tf.tile(tf.range(samples), [batch_size])
    row_max_lengths = tf.repeat(tf.cast(max_lengths, tf.int32), samples)
    max_length = tf.maximum(tf.reduce_max(row_max_lengths), 0)
    ids = tf.fill([rows], start_id)
    if token_filter is None:
        filter_state = ()

    def body(index, ids, outputs, log_probs, lengths, state, filter_state):
        logits, state = step_fn(ids, index, state, sentence_state)
        logits = tf.cast(logits, tf.float32)
        room = row_max_lengths - (index + 1)
        choosable = logits
        if token_filter is not None:
            filter_state = tf.cond(index > 0, lambda: token_filter.update(filter_state, ids), lambda: filter_state)
            choosable = tf.where(token_filter.allowed(filter_state, room), logits, NEG_INF)
        vocab_size = tf.shape(logits)[1]
        if min_length > 0:
            too_early = (index + 1 < min_length) & tf.equal(tf.range(vocab_size), eos_id)
            choosable = tf.where(too_early[None, :], NEG_INF, choosable)
        tempered = choosable / temperature
        if top_k > 0:
            kth_best = tf.math.top_k(choosable, k=tf.minimum(top_k, vocab_size)).values[:, -1:]
            tempered = tf.where(choosable >= kth_best, tempered, NEG_INF)
        drawn = tf.argmax(tempered + gumbel_noise(row_seeds, streams, index, vocab_size), axis=-1, output_type=tf.int32)
        done = lengths > 0  # rows that already ended: they keep feeding EOS, their outputs fixed
        token = tf.where(room <= 0, eos_id, drawn)
        token = tf.where(done, PAD_ID, token)
        normalizers, _ = log_normalizers_at(logits, tf.argmax(logits, axis=-1, output_type=tf.int32))
        token_log_prob = tf.gather(logits, token, batch_dims=1) - normalizers
        log_probs += tf.where(done, 0.0, token_log_prob)
        lengths = tf.where(~done & tf.equal(token, eos_id), index + 1, lengths)
        outputs = tf.concat([outputs, token[:, None]], axis=1)
        return index + 1, tf.where(done, eos_id, token), outputs, log_probs, lengths, state, filter_state

    def condition(index, ids, outputs, log_probs, lengths, state, filter_state):
        del ids, outputs, log_probs, state, filter_state
        return (index < max_length) & tf.reduce_any(lengths == 0)

    loop_vars = (tf.constant(0), ids, tf.zeros([rows, 0], tf.int32), tf.zeros([rows]), tf.zeros([rows], tf.int32),
                 initial_state, filter_state)
    shape_invariants = tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), loop_vars)
    _, _, tokens, log_probs, lengths, _, _ = tf.while_loop(
        condition, body, loop_vars, shape_invariants=shape_invariants, maximum_iterations=max_length
    )
    tokens = tf.reshape(tokens, [batch_size, samples, -1])
    steps = tf.shape(tokens)[2]
    lengths = tf.where(lengths == 0, tf.minimum(row_max_lengths, steps), lengths)  # only with max length 0
    scores = tf.reshape(log_probs / length_penalty(lengths, alpha), [batch_size, samples])
    lengths = tf.reshape(lengths, [batch_size, samples])
    keep = tf.sequence_mask(lengths, steps)
    tokens = tf.where(keep, tokens, PAD_ID)
    order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
    return BeamSearchResult(
        tf.gather(tokens, order, batch_dims=1), tf.gather(scores, order, batch_dims=1), tf.gather(lengths, order, batch_dims=1)
    )


_MIX1, _MIX2 = 0x85EBCA6B, 0xC2B2AE35


def _mix32(h):
    """murmur3's 32-bit finaliser: a bijection whose every output bit depends on every input bit."""
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))
    h = h * tf.constant(_MIX1, tf.uint32)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(13, tf.uint32)))
    h = h * tf.constant(_MIX2, tf.uint32)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))


def gumbel_noise(row_seeds, streams, index, vocab_size):
    """Gumbel(0, 1) noise [rows, V], a function of (row seed, stream, position `index`, token)
    alone: argmax(logits + noise) is then a draw from softmax(logits) (the Gumbel-max trick)
    that does not depend on which rows share the batch. `streams` [rows] tells apart the
    samples drawn with one seed."""
    seeds = tf.cast(row_seeds, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(seeds, tf.constant(0xFFFFFFFF, tf.int64)), tf.uint32)
    high = tf.cast(tf.bitwise.right_shift(seeds, tf.constant(32, tf.int64)), tf.uint32)
    position = tf.cast(index, tf.uint32) * tf.constant(0x9E3779B9, tf.uint32)
    stream = _mix32(tf.cast(streams, tf.uint32) + tf.constant(0x632BE5AB, tf.uint32))
    xor = tf.bitwise.bitwise_xor
    row_key = _mix32(xor(_mix32(xor(low, position)) + high, stream))[:, None]  # [rows, 1]
    tokens = tf.range(vocab_size, dtype=tf.int32)
    token_key = tf.cast(tokens, tf.uint32) * tf.constant(0x27D4EB2F, tf.uint32)
    bits = _mix32(_mix32(xor(row_key, token_key[None, :])) + row_key)  # [rows, V]
    uniform = (tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)), tf.float32) + 0.5) * (1.0 / (1 << 24))
    return -tf.math.log(-tf.math.log(uniform))

"""Beam search on step functions that replay hand-written probability tables, and on the model."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.decoding import graph_search
from t2t_keras.decoding.kernel_choices import DecodeKernels
from t2t_keras.decoding.beam_search import beam_search, length_penalty, search_in_parts
from t2t_keras.models import Transformer

PAD, EOS, A, B = 0, 1, 2, 3
TINY = 1e-12  # "impossible" (log would be -inf)


def table_step_fn(tables):
    """A step function whose next-token distribution depends only on (step, last token fed).

    tables[step][last_token] is a probability row over {PAD, EOS, A, B}; at step 0 the fed
    token is the start symbol 0.
    """
    log_tables = tf.constant(np.log(np.maximum(np.asarray(tables, np.float64), TINY)), tf.float32)

    def step_fn(ids, index, state, sentence_state):
        return tf.gather(log_tables[index], ids), state

    return step_fn


def row(eos, a, b):
    return [TINY, eos, a, b]


def run(tables, beam_size, alpha, max_length, batch=1):
    """The whole n-best list of each sentence (every hypothesis settled) and its scores."""
    result = beam_search(
        table_step_fn(tables), tf.zeros([batch * beam_size, 1]), batch, beam_size, alpha,
        tf.fill([batch], max_length), eos_id=EOS, n_best=beam_size,
    )
    hypotheses = [[list(ids[: length]) for ids, length in zip(b_ids, b_len)] for b_ids, b_len in zip(result.ids.numpy(), result.lengths.numpy())]
    return hypotheses, result.scores.numpy()


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


# Step 0 from the start symbol: EOS 0.1, A 0.6, B 0.3. Step 1: after A, EOS 0.9; after B, EOS 0.4.
SIMPLE = [
    [row(0.1, 0.6, 0.3)] * 4,
    [row(0.5, 0.25, 0.25), row(0.5, 0.25, 0.25), row(0.9, 0.05, 0.05), row(0.4, 0.3, 0.3)],
    [row(0.5, 0.25, 0.25)] * 4,
    [row(0.5, 0.25, 0.25)] * 4,
]


def test_expected_hypotheses_without_length_penalty():
    hypotheses, scores = run(SIMPLE, beam_size=2, alpha=0.0, max_length=4)
    # Finished after step 1: [A EOS] 0.54, [B EOS] 0.12 (beating [EOS] 0.1); the best alive
    # ([B A] or [B B], 0.09) cannot beat 0.12 any more, so the search stops there.
    assert hypotheses == [[[A, EOS], [B, EOS]]]
    np.testing.assert_allclose(scores[0], [np.log(0.54), np.log(0.12)], rtol=1e-5)


def test_greedy_is_beam_one():
    hypotheses, scores = run(SIMPLE, beam_size=1, alpha=0.0, max_length=4)
    assert hypotheses == [[[A, EOS]]]
    np.testing.assert_allclose(scores[0], [np.log(0.54)], rtol=1e-5)


def test_eos_at_the_first_step():
    tables = [
        [row(0.9, 0.06, 0.04)] * 4,
        [row(0.5, 0.25, 0.25)] * 4,
        [row(0.5, 0.25, 0.25)] * 4,
    ]
    hypotheses, scores = run(tables, beam_size=2, alpha=0.0, max_length=3)
    # [EOS] 0.9 finishes at once; [A EOS] 0.03 fills the second slot; alive [A A] 0.015 cannot beat it.
    assert hypotheses == [[[EOS], [A, EOS]]]
    np.testing.assert_allclose(scores[0], [np.log(0.9), np.log(0.03)], rtol=1e-5)


# EOS is unlikely until the maximum length (2) forces it: [EOS] 0.006 vs [A EOS] 0.59 * 0.009.
AT_MAX_LENGTH = [
    [row(0.006, 0.594, 0.4)] * 4,
    [row(0.5, 0.25, 0.25), row(0.5, 0.25, 0.25), row(0.009, 0.5, 0.491), row(0.001, 0.5, 0.499)],
]


def test_eos_forced_at_max_length_without_penalty():
    hypotheses, scores = run(AT_MAX_LENGTH, beam_size=2, alpha=0.0, max_length=2)
    # log 0.006 = -5.116 beats log(0.594 * 0.009) = -5.231; [B EOS] 0.0004 is last.
    assert hypotheses == [[[EOS], [A, EOS]]]
    np.testing.assert_allclose(scores[0], [np.log(0.006), np.log(0.594 * 0.009)], rtol=1e-5)


def test_length_penalty_prefers_the_longer_hypothesis():
    hypotheses, scores = run(AT_MAX_LENGTH, beam_size=2, alpha=0.6, max_length=2)
    # (5+2)/6)^0.6 = 1.097: [A EOS] -5.231 / 1.097 = -4.769 now beats [EOS] -5.116 / 1.
    assert hypotheses == [[[A, EOS], [EOS]]]
    np.testing.assert_allclose(scores[0], [np.log(0.594 * 0.009) / lp(2, 0.6), np.log(0.006)], rtol=1e-5)


def test_every_hypothesis_stops_at_its_sentence_max_length():
    never_eos = [[row(TINY, 0.5, 0.5)] * 4] * 6
    result = beam_search(table_step_fn(never_eos), tf.zeros([4, 1]), 2, 2, 0.6, tf.constant([3, 5]), eos_id=EOS)
    assert result.lengths.numpy().tolist() == [[3, 3], [5, 5]]
    assert (result.ids.numpy()[0, :, 2] == EOS).all() and (result.ids.numpy()[1, :, 4] == EOS).all()
    assert (result.ids.numpy()[0, :, 3:] == 0).all()


@pytest.mark.parametrize("native", [False, True])
def test_min_length_keeps_eos_out_until_then_and_max_length_still_ends(native):
    """min_length 3: EOS is no candidate at the first two positions; the log-probabilities are
    still the model's (EOS's probability stays in the normaliser); a maximum of 2 still ends
    the outputs at 2. The native kernels' path gives the same."""
    def search(max_length, min_length):
        result = beam_search(table_step_fn(SIMPLE), tf.zeros([2, 1]), 1, 2, 0.0, tf.fill([1], max_length), eos_id=EOS,
                             n_best=2, kernels=DecodeKernels(beam_candidates="native" if native else "graph"), min_length=min_length)
        return result.lengths.numpy()[0].tolist(), result.scores.numpy()[0], result.ids.numpy()[0]

    lengths, scores, ids = search(max_length=4, min_length=3)
    # Alive after two steps: [B A] and [B B] (0.3 * 0.3 = 0.09 each, beating [A A] and [A B] at
    # 0.6 * 0.05); then EOS (0.5) ends both; the unconstrained search ends with [A EOS] at once.
    assert lengths == [3, 3]
    assert sorted(map(tuple, ids[:, :3].tolist())) == [(B, A, EOS), (B, B, EOS)]
    np.testing.assert_allclose(scores, [np.log(0.3 * 0.3 * 0.5)] * 2, rtol=1e-5)
    lengths, _, ids = search(max_length=2, min_length=3)
    assert lengths == [2, 2] and (ids[:, 1] == EOS).all()
    assert search(max_length=4, min_length=0)[0] == [2, 2]


def test_length_penalty_formula():
    np.testing.assert_allclose(float(length_penalty(10, 0.6)), (15 / 6) ** 0.6, rtol=1e-6)
    assert float(length_penalty(10, 0.0)) == 1.0


# --- a token filter restricts the choices, never the scores ---


class MinimumLength:
    """A TokenFilter: EOS only after `minimum` tokens, and no other token once just enough room
    is left for EOS; its state counts the tokens each hypothesis took."""

    def __init__(self, minimum, vocab_size=4):
        self.minimum, self.vocab_size = minimum, vocab_size

    def initial_state(self, input_ids, beam_size):
        return tf.zeros([tf.shape(input_ids)[0] * beam_size], tf.int32)

    def update(self, state, ids):
        return state + 1

    def allowed(self, state, room):
        is_eos = tf.range(self.vocab_size) == EOS
        eos_ok = (state + 1 >= self.minimum)[:, None]
        other_ok = (room > 0)[:, None] & (tf.range(self.vocab_size) != PAD)
        return tf.where(is_eos, eos_ok, other_ok)


def _exhaustive(tables, max_length, alpha, minimum, keep):
    """The `keep` best complete hypotheses of at least `minimum` tokens, by enumeration."""
    import itertools

    found = []
    for length in range(max(minimum, 1), max_length + 1):
        for body in itertools.product([A, B], repeat=length - 1):
            sequence, fed, log_p = [*body, EOS], 0, 0.0
            for step, token in enumerate(sequence):
                log_p += np.log(tables[step][fed][token])
                fed = token
            found.append((log_p / lp(length, alpha), sequence))
    found.sort(key=lambda item: -item[0])
    return found[:keep]


@pytest.mark.parametrize("minimum, alpha", [(1, 0.0), (3, 0.0), (3, 0.6), (4, 1.0)])
def test_filtered_search_finds_the_exhaustive_best(minimum, alpha):
    """Beam 8 over 2 tokens and 4 steps, searched exactly: it must return the enumeration's 3
    best, scored with the unfiltered table's log-probabilities (the filter does not
    renormalise); the default stopping rule the enumeration's best."""
    token_filter = MinimumLength(minimum)
    expected = _exhaustive(SIMPLE, 4, alpha, minimum, keep=3)
    for exact, keep in ((True, 3), (False, 1)):
        result = beam_search(
            table_step_fn(SIMPLE), tf.zeros([8, 1]), 1, 8, alpha, tf.constant([4]), eos_id=EOS,
            token_filter=token_filter, filter_state=token_filter.initial_state(tf.zeros([1, 3]), 8), exact=exact,
        )
        hypotheses = [list(ids[:length]) for ids, length in zip(result.ids.numpy()[0], result.lengths.numpy()[0])]
        assert hypotheses[:keep] == [sequence for _, sequence in expected[:keep]]
        np.testing.assert_allclose(result.scores.numpy()[0, :keep], [score for score, _ in expected[:keep]], rtol=1e-5)
        assert all(len(h) >= minimum for h in hypotheses if h)  # (an empty slot: nothing finished in it)
        assert all(hypotheses[:keep])


# Step 0: EOS 0.7 (finished at once); every later step is flat. Alive hypotheses keep losing
# probability, but at alpha 1.0 one that grew to the maximum length of 40 would be divided by
# (45 / 6) = 7.5 against [EOS]'s 1: the exact bound keeps searching long after the outcome is clear.
CLEAR_AT_ONCE = [[row(0.7, 0.15, 0.15)] * 4] + [[row(0.2, 0.4, 0.4)] * 4] * 39


def test_default_stop_settles_when_the_best_finished_beats_the_alive_ones_at_their_length():
    results = {exact: beam_search(table_step_fn(CLEAR_AT_ONCE), tf.zeros([4, 1]), 1, 4, 1.0, tf.constant([40]),
                                  eos_id=EOS, exact=exact) for exact in (False, True)}
    assert results[False].ids.numpy()[0, 0].tolist()[:1] == results[True].ids.numpy()[0, 0].tolist()[:1] == [EOS]
    assert results[False].scores.numpy()[0, 0] == results[True].scores.numpy()[0, 0]
    # [A] at 0.15 ending next would score at most log 0.15 / (7 / 6) = -1.63 < log 0.7: settled after one step.
    assert results[False].ids.shape[-1] == 1
    # log(0.15 * 0.4^(t-1)) / ((5 + 40) / 6) > log 0.7 while t < ~3.5: the exact bound runs on.
    assert results[True].ids.shape[-1] > 2


# --- on the model: the cache must not change the search ---

VOCAB = 40


def _model():
    hp = dataclasses.replace(registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64)
    return Transformer.from_hparams(hp, VOCAB)


def _sources():
    return tf.constant([[5, 6, 7, 1, 0, 0], [8, 9, 10, 11, 12, 1], [13, 1, 0, 0, 0, 0]])


def _cached_search(model, sources, beam_size, alpha, extra_length=6):
    return graph_search.search_batch(model, sources, beam_size, alpha, graph_search.max_lengths(sources, extra_length))


def _uncached_search(model, sources, beam_size, alpha, extra_length=6):
    """The same search, recomputing the decoder over the whole prefix at every step."""
    return graph_search.search_batch(model, sources, beam_size, alpha, graph_search.max_lengths(sources, extra_length),
                                       cached=False)


@pytest.mark.parametrize("beam_size, alpha", [(1, 0.0), (4, 0.6)])
def test_cached_and_uncached_search_agree(beam_size, alpha):
    model = _model()
    cached = _cached_search(model, _sources(), beam_size, alpha)
    uncached = _uncached_search(model, _sources(), beam_size, alpha)
    np.testing.assert_array_equal(cached.ids.numpy(), uncached.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), uncached.scores.numpy(), atol=1e-4)


@pytest.mark.parametrize("parts", [2, 5])  # 5 parts of 3 sentences: empty ones and ones of 1
def test_search_in_parts_is_one_search(parts):
    """Searching a batch in parts side by side (some empty: 5 parts of 3 sentences) gives what
    one search over the batch gives, ids padded to the longest part; an empty batch gives no
    hypotheses."""
    model = _model()
    search = tf.function(lambda sources: _cached_search(model, sources, 4, 0.6), autograph=False)
    whole = search(_sources())
    in_parts = tf.function(lambda sources: search_in_parts(lambda part: _cached_search(model, part, 4, 0.6), sources, parts),
                           autograph=False)
    split = in_parts(_sources())
    np.testing.assert_array_equal(split.ids.numpy(), whole.ids.numpy())
    np.testing.assert_array_equal(split.lengths.numpy(), whole.lengths.numpy())
    np.testing.assert_allclose(split.scores.numpy(), whole.scores.numpy(), atol=1e-5)
    assert in_parts(_sources()[:0]).ids.shape[:2] == [0, 4]

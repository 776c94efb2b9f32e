"""Sampling: draws from the model's (tempered, truncated) distribution, reproducible per sentence."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.decoding.beam_search import gumbel_noise, sample
from tests.testing import FixedTokenFilter

EOS = 1
FIRST_STEP = np.array([0.0, 0.05, 0.15, 0.2, 0.25, 0.35])  # P(first token): 1 is EOS; 0 (pad) never


def _known_model():
    """A step function whose first token has the distribution FIRST_STEP, then always EOS."""
    first = tf.constant(np.log(np.maximum(FIRST_STEP, 1e-30)), tf.float32)
    then_eos = tf.constant([-1e9, 0.0, -1e9, -1e9, -1e9, -1e9], tf.float32)

    def step_fn(ids, index, state, sentence_state):
        logits = tf.where(index == 0, first, then_eos)
        return tf.tile(logits[None, :], [tf.shape(ids)[0], 1]), state

    return step_fn


def _first_tokens(seeds, **kwargs):
    result = sample(_known_model(), (), tf.constant(seeds, tf.int64), tf.fill([len(seeds)], 3), eos_id=EOS, **kwargs)
    return result.ids.numpy()[:, 0, 0], result


def _assert_frequencies(tokens, probabilities):
    counts = np.bincount(tokens, minlength=len(probabilities))
    expected = len(tokens) * probabilities
    sigma = np.sqrt(len(tokens) * probabilities * (1 - probabilities))
    assert np.all(np.abs(counts - expected) <= 4 * sigma + 1e-9), (counts, expected)


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_frequencies_of_10000_samples_match_the_tempered_distribution(temperature):
    tokens, result = _first_tokens(np.arange(10_000), temperature=temperature)
    tempered = FIRST_STEP ** (1 / temperature)
    _assert_frequencies(tokens, tempered / tempered.sum())
    # The score is log P under the model itself (untempered): the first token's, then EOS's (1).
    np.testing.assert_allclose(result.scores.numpy()[:, 0], np.log(FIRST_STEP[tokens]), atol=1e-5)
    np.testing.assert_array_equal(result.lengths.numpy()[:, 0], np.where(tokens == EOS, 1, 2))  # EOS ends at once


def test_top_k_never_leaves_the_k_best_and_keeps_their_proportions():
    tokens, _ = _first_tokens(np.arange(10_000), top_k=2)
    assert set(tokens) == {4, 5}
    _assert_frequencies(tokens, np.array([0, 0, 0, 0, 0.25, 0.35]) / 0.6)


def test_a_sentences_samples_depend_on_its_seed_alone():
    seeds = np.array([11, 12, 13, 14, 15])
    tokens, _ = _first_tokens(seeds)
    again, _ = _first_tokens(seeds)
    np.testing.assert_array_equal(tokens, again)
    in_a_larger_batch, _ = _first_tokens(np.concatenate([[7, 8, 9], seeds, [1, 2]]))
    np.testing.assert_array_equal(in_a_larger_batch[3:8], tokens)
    several, result = _first_tokens(np.repeat(seeds, 1), samples=4)
    assert result.ids.shape[:2] == (5, 4)
    # Different seeds and different samples of one seed are different draws.
    noise = gumbel_noise(tf.constant([1, 1, 2], tf.int64), tf.constant([0, 1, 0]), 0, 1000).numpy()
    assert not np.allclose(noise[0], noise[1]) and not np.allclose(noise[0], noise[2])
    # Gumbel(0, 1): mean 0.5772 (Euler's constant), variance pi^2 / 6.
    assert abs(noise.mean() - 0.5772) < 0.08 and abs(noise.var() - np.pi**2 / 6) < 0.3


def test_a_token_filter_restricts_the_draws_and_the_scores_stay_the_models():
    seeds = np.arange(2000)
    filtered = FixedTokenFilter([False, True, True, False, True, False])  # EOS, 2 and 4
    tokens, result = _first_tokens(seeds, token_filter=filtered,
                                   filter_state=filtered.initial_state(tf.zeros([len(seeds), 1], tf.int32), 1))
    assert set(tokens) == {EOS, 2, 4}
    allowed = np.array([0, 0.05, 0.15, 0, 0.25, 0])
    _assert_frequencies(tokens, allowed / allowed.sum())
    np.testing.assert_allclose(result.scores.numpy()[:, 0], np.log(FIRST_STEP[tokens]), atol=1e-5)


def test_min_length_keeps_eos_from_the_first_draw_and_the_scores_stay_the_models():
    seeds = np.arange(2000)
    tokens, result = _first_tokens(seeds, min_length=2)
    assert EOS not in set(tokens)
    _assert_frequencies(tokens, np.array([0, 0, 0.15, 0.2, 0.25, 0.35]) / 0.95)
    np.testing.assert_allclose(result.scores.numpy()[:, 0], np.log(FIRST_STEP[tokens]), atol=1e-5)
    np.testing.assert_array_equal(result.lengths.numpy()[:, 0], 2)

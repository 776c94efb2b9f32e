"""The lexical shortlist: its counts, the batch vocabulary, and beam search over it."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.checkpoints import RunDir
from t2t_keras.decoding import graph_search
from t2t_keras.decoding.kernel_choices import DecodeKernels
from t2t_keras.decoding.line_decoding import padded_batch
from t2t_keras.decoding import shortlist as shortlist_module
from t2t_keras.decoding.shortlist import NUM_RESERVED, Shortlist, load_run_shortlist
from t2t_keras.translator import Translator
from t2t_keras.errors import UsageError
from t2t_keras.kernels import native
from t2t_keras.models import Transformer, factory
from tests.testing import FixedTokenFilter

VOCAB = 40

# Source token 5 always comes with target 20; source 6 with 21, twice with 22 too; target 30
# is in every pair (frequent, but nobody's best partner).
PAIRS = [([5, 1], [20, 30, 1]), ([5, 7, 1], [20, 30, 1]), ([6, 1], [21, 30, 1]), ([6, 1], [21, 22, 30, 1]),
         ([6, 7, 1], [21, 22, 30, 1])]


def test_candidates_are_ranked_by_dice_and_frequent_by_pair_count():
    shortlist = Shortlist.from_pairs(PAIRS, VOCAB, VOCAB, per_source=3, frequent=2)
    # Dice(5, 20) = 2*2/(2+2) = 1; Dice(5, 30) = 2*2/(2+5); Dice(5, 1) = 2*2/(2+5), tie broken by id.
    assert shortlist.candidates[5].tolist() == [20, 1, 30]
    assert shortlist.candidates[6].tolist() == [21, 22, 1]  # Dice 1, 0.8, then 1 and 30 tie at 0.75
    assert shortlist.candidates[8].tolist() == [0, 0, 0]  # never seen: PAD, in every shortlist anyway
    assert shortlist.frequent.tolist() == [1, 30]
    # Counting in blocks of two pairs gives the same table as all at once.
    chunked = Shortlist.from_pairs(PAIRS, VOCAB, VOCAB, per_source=3, frequent=2, block_pairs=2)
    np.testing.assert_array_equal(chunked.candidates, shortlist.candidates)
    limited = shortlist.limited(1, 1)
    assert limited.candidates[6].tolist() == [21] and limited.frequent.tolist() == [1]


def test_counts_merged_block_by_block_give_the_table_of_all_pairs_at_once(monkeypatch):
    """A large corpus's blocks are merged into the running counts as they come (geometrically):
    forced here from the first block of 7 random pairs on, the table is the one counted in one block."""
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(3, VOCAB, rng.integers(1, 8)).tolist(), rng.integers(3, VOCAB, rng.integers(1, 8)).tolist())
             for _ in range(300)]
    at_once = Shortlist.from_pairs(pairs, VOCAB, VOCAB, per_source=12, frequent=10, block_pairs=len(pairs))
    monkeypatch.setattr(shortlist_module, "MERGE_FLOOR", 0)
    merged = Shortlist.from_pairs(pairs, VOCAB, VOCAB, per_source=12, frequent=10, block_pairs=7)
    np.testing.assert_array_equal(merged.candidates, at_once.candidates)
    np.testing.assert_array_equal(merged.frequent, at_once.frequent)


def test_merged_alternates_by_rank_each_token_once_in_the_first_ones_size():
    ours = Shortlist(np.array([[5, 6, 0], [7, 0, 0]], np.int32), np.array([1, 4, 9], np.int32))
    theirs = Shortlist(np.array([[6, 8, 9], [0, 0, 0]], np.int32), np.array([4, 2, 3], np.int32))
    merged = ours.merged(theirs)
    assert merged.candidates.tolist() == [[5, 6, 8], [7, 0, 0]]
    assert merged.frequent.tolist() == [1, 4, 2]


def test_group_vocabularies_and_each_sentences_own_shortlist_in_its_group():
    shortlist = Shortlist.from_pairs(PAIRS, VOCAB, VOCAB, per_source=2, frequent=1)
    sources = tf.constant([[5, 1, 0], [6, 6, 1], [5, 6, 1]])
    # frequent: 1; candidates of 5: 20, 1; of 6: 21, 22; of EOS (in every pair): 1, 30; of PAD: none.
    vocabulary, groups = shortlist.vocabularies(sources, 1)
    # One group: the batch's union, then 30 again up to 32 columns (TOP_K_BLOCK), masked for every sentence.
    assert vocabulary.numpy().tolist() == [[0, 1, 2, 20, 21, 22, 30] + [30] * 25] and groups.numpy().tolist() == [0, 0, 0]
    mask = shortlist.sentence_mask(sources, vocabulary, groups).numpy().tolist()
    assert mask == [[True, True, True, True, False, False, True] + [False] * 25,
                    [True, True, True, False, True, True, True] + [False] * 25,
                    [True, True, True, True, True, True, True] + [False] * 25]
    # Three groups of ceil(3 / 3) = 1; four of ceil(3 / 4) = 1, the last empty: the reserved and frequent tokens only.
    vocabulary, groups = shortlist.vocabularies(sources, 4)
    assert groups.numpy().tolist() == [0, 1, 2]
    assert vocabulary.numpy().tolist() == [[0, 1, 2, 20, 30] + [30] * 27, [0, 1, 2, 21, 22, 30] + [30] * 26,
                                           [0, 1, 2, 20, 21, 22, 30] + [30] * 25, [0, 1, 2] + [2] * 29]
    mask = shortlist.sentence_mask(sources, vocabulary, groups).numpy().tolist()
    assert mask == [[True] * 5 + [False] * 27, [True] * 6 + [False] * 26, [True] * 7 + [False] * 25]
    # Two groups of ceil(3 / 2) = 2.
    vocabulary, groups = shortlist.vocabularies(sources, 2)
    assert groups.numpy().tolist() == [0, 0, 1]
    assert vocabulary.numpy()[:, :7].tolist() == [[0, 1, 2, 20, 21, 22, 30], [0, 1, 2, 20, 21, 22, 30]]


def _model():
    hp = dataclasses.replace(registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64)
    return Transformer.from_hparams(hp, VOCAB)


SOURCES = tf.constant([[5, 6, 7, 1, 0, 0], [8, 9, 10, 11, 12, 1], [13, 1, 0, 0, 0, 0]])
RANDOM_SHORTLIST = Shortlist(np.random.default_rng(0).integers(NUM_RESERVED, VOCAB, [VOCAB, 1]).astype(np.int32),
                             np.array([1, 4], np.int32))


def _search(model, shortlist, cached=True, token_filter=None, sources=SOURCES, native_kernels=False, int8_logits=False):
    """The n-best lists (all 4 hypotheses of each sentence settled)."""
    native_ = "native" if native_kernels or int8_logits else "graph"
    return graph_search.search_batch(model, sources, 4, 0.6, graph_search.max_lengths(sources, 6), token_filter,
                                     cached=cached, shortlist=shortlist, n_best=4,
                                     kernels=DecodeKernels(beam_candidates=native_, top_k=native_, attention=native_,
                                                           int8_logits=int8_logits))


@pytest.mark.parametrize("vocab, listed, precision", [
    (VOCAB, False, "fp32"), (3000, True, "fp32"), (VOCAB, True, "bf16"), (3000, False, "bf16"),
])
def test_the_native_kernels_search_as_the_graph_ops(vocab, listed, precision):
    """The search in this process with the native kernels (the step's logits read as the
    product gives them, bfloat16 in a bf16 model; its attentions as one kernel each): the same
    n-best lists, scores equal to float32 rounding, with the whole vocabulary and over a
    shortlist (columns unknown when the graph is built)."""
    assert native.library() is not None, native.unavailable_reason()
    hp = dataclasses.replace(registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64)
    model = factory.in_precision(Transformer.from_hparams(hp, vocab), precision)
    shortlist = RANDOM_SHORTLIST if listed else None
    graph, native_ = _search(model, shortlist), _search(model, shortlist, native_kernels=True)
    np.testing.assert_array_equal(native_.ids.numpy(), graph.ids.numpy())
    np.testing.assert_array_equal(native_.lengths.numpy(), graph.lengths.numpy())
    np.testing.assert_allclose(native_.scores.numpy(), graph.scores.numpy(), rtol=1e-6)


def test_a_shortlist_of_every_token_searches_as_no_shortlist():
    model = _model()
    everything = Shortlist(np.zeros([VOCAB, 1], np.int32), np.arange(VOCAB, dtype=np.int32))
    full, listed = _search(model, None), _search(model, everything)
    np.testing.assert_array_equal(listed.ids.numpy(), full.ids.numpy())
    np.testing.assert_allclose(listed.scores.numpy(), full.scores.numpy(), atol=1e-5)


def test_cached_shortlist_step_is_the_full_logits_at_the_shortlisted_columns():
    """The cache's gathered output rows give the search what the whole decoder's logits, cut to
    the shortlist's columns, give; every output token is in its sentence's own shortlist."""
    model = _model()
    cached, reference = _search(model, RANDOM_SHORTLIST), _search(model, RANDOM_SHORTLIST, cached=False)
    np.testing.assert_array_equal(cached.ids.numpy(), reference.ids.numpy())
    np.testing.assert_allclose(cached.scores.numpy(), reference.scores.numpy(), atol=1e-4)
    for sentence, ids in zip(SOURCES, cached.ids.numpy()):
        own = set(RANDOM_SHORTLIST.vocabularies(sentence[None, :], 1)[0].numpy().ravel().tolist())
        assert set(np.unique(ids).tolist()) <= own and len(own) < VOCAB // 2  # the shortlist does restrict the choice
    assert not np.array_equal(cached.ids.numpy(), _search(model, None).ids.numpy())


@pytest.mark.parametrize("int8_logits", [False, True])
def test_a_sentence_searches_the_same_alone_as_in_its_batch(int8_logits):
    """Each sentence's choice and normaliser are its own shortlist's, not its group's union; in
    int8, each hypothesis's states are quantised by their own maximum, not the batch's."""
    model = _model()
    together = _search(model, RANDOM_SHORTLIST, int8_logits=int8_logits)
    for row in range(SOURCES.shape[0]):
        alone = _search(model, RANDOM_SHORTLIST, sources=SOURCES[row : row + 1], int8_logits=int8_logits)
        steps = alone.ids.shape[2]
        np.testing.assert_array_equal(alone.ids.numpy()[0], together.ids.numpy()[row, :, :steps])
        np.testing.assert_allclose(alone.scores.numpy()[0], together.scores.numpy()[row], atol=1e-5)


def test_an_ensemble_of_a_model_with_itself_searches_the_shortlist_as_that_model():
    """The ensemble hands the batch's output rows and each sentence's list to every member."""
    from t2t_keras.decoding.ensemble import Ensemble

    model = _model()
    alone, doubled = _search(model, RANDOM_SHORTLIST), _search(Ensemble([model, model]), RANDOM_SHORTLIST)
    np.testing.assert_array_equal(doubled.ids.numpy(), alone.ids.numpy())
    np.testing.assert_allclose(doubled.scores.numpy(), alone.scores.numpy(), atol=1e-4)


def test_a_token_filter_still_applies_over_a_shortlist():
    result = _search(_model(), RANDOM_SHORTLIST, token_filter=FixedTokenFilter([token % 2 == 1 for token in range(VOCAB)]))
    tokens = result.ids.numpy()
    assert np.all((tokens == 0) | (tokens % 2 == 1)) and np.any(tokens > 1)


def test_run_dir_shortlist_decodes_and_bad_settings_are_one_line(trained_output_dir, tmp_path):
    """The trainer wrote the run's shortlist; the Translator decodes with it from shortlisted
    tokens only; a run dir without one, or a shortlist with sampling, is refused in one line."""
    run_dir = RunDir(trained_output_dir)
    stored = load_run_shortlist(run_dir)
    assert stored.candidates.shape == (run_dir.vocabularies().source.size, 100) and stored.frequent.shape == (1000,)
    translator = Translator.from_preset(trained_output_dir, beam_size=2, shortlist=5, shortlist_frequent=20)
    lines = ["A dog runs in the snow.", "Two men are talking."]
    ids = translator.search_module().translate_ids(padded_batch([translator.vocabularies.source.encode(l, add_eos=True)
                                                                 for l in lines]))["ids"].numpy()
    sources = padded_batch([translator.vocabularies.source.encode(l, add_eos=True) for l in lines])
    allowed = set(stored.limited(5, 20).vocabularies(sources, 1)[0].numpy().ravel().tolist())
    assert set(np.unique(ids).tolist()) <= allowed and len(allowed) < 200
    assert all(isinstance(text, str) for text in translator.generate(lines))
    unlisted = Translator.from_preset(trained_output_dir, beam_size=2)
    assert unlisted.generate(lines, shortlist=5, shortlist_frequent=20) == translator.generate(lines)  # one call's shortlist

    with pytest.raises(UsageError, match="shortlist is for beam search"):
        Translator.from_preset(trained_output_dir, shortlist=5, sampling_top_k=5)
    with pytest.raises(UsageError, match=r"shortlist.npz is missing .* or decode with shortlist=0\.$"):
        load_run_shortlist(RunDir(str(tmp_path)))


def test_int8_logits_decode_in_this_process_and_an_export_refuses_them(trained_output_dir):
    """int8_logits: the Translator decodes with the native int8 output product, with a shortlist or
    without, each output from its own sentence's list; a SavedModel's module refuses it in one line."""
    from t2t_keras.decoding.engine import export_search_module
    from t2t_keras.decoding.trained_run import TrainedRun

    lines = ["A dog runs in the snow.", "Two men are talking."]
    for listed in ({}, {"shortlist": 5, "shortlist_frequent": 20}):
        translator = Translator.from_preset(trained_output_dir, beam_size=2, int8_logits=True, **listed)
        assert translator.search_module().kernels.int8_logits
        assert all(isinstance(text, str) and text for text in translator.generate(lines))
    with pytest.raises(UsageError, match=r"int8_logits is a native kernel of decoding in this process, not of a SavedModel"):
        export_search_module(TrainedRun.resolve(trained_output_dir, {"int8_logits": True}, for_export=True))


"""Decoding constrained to well-formed trees: the filter's rules, and beam search under it."""

import pytest
import tensorflow as tf

from t2t_keras.data.tokenizers import Vocabularies
from t2t_keras.decoding.beam_search import beam_search
from t2t_keras.parsing.tree_filter import TreeFilter
from t2t_keras.parsing.trees import restore, words_to_placeholders
from t2t_keras.token_ids import EOS_ID


class PieceList:
    """Just what TreeFilter reads of a Vocabulary: its pieces."""

    def __init__(self, pieces):
        self.size, self._pieces = len(pieces), pieces
        self.sha256 = str(pieces)

    def pieces(self, ids):
        return [self._pieces[i] for i in ids]


TARGET = ["<pad>", "</s>", "<unk>", "▁XX", "▁)", "▁(S", "▁(NP", "▁(VP", "▁the"]
XX, CLOSE, S, NP, VP, WORD_PIECE = 3, 4, 5, 6, 7, 8
SOURCE = ["<pad>", "</s>", "<unk>", "▁The", "▁cat", "▁sat", "s", "▁.", "<0x41>"]
# "The cat sat s ." as pieces: 4 words ("sat" + "s" is one word), EOS, padding.
SENTENCE = [3, 4, 5, 6, 7, 1, 0]
VOCABULARIES = Vocabularies(PieceList(SOURCE), PieceList(TARGET))


def _allowed_after(tokens, room=100):
    token_filter = TreeFilter(VOCABULARIES)
    state = token_filter.initial_state(tf.constant([SENTENCE]), 1)
    for token in tokens:
        state = token_filter.update(state, tf.constant([token]))
    allowed = token_filter.allowed(state, tf.constant([room]))[0].numpy()
    return {token for token in range(len(TARGET)) if allowed[token]}


def test_the_gold_tree_is_allowed_step_by_step_and_nothing_ill_formed():
    gold = [S, NP, XX, XX, CLOSE, VP, XX, CLOSE, XX, CLOSE, EOS_ID]
    assert _allowed_after([]) == {S, NP, VP}  # a root first: no XX, ")" or EOS at depth 0
    assert _allowed_after([S]) == {S, NP, VP, XX}  # no empty constituent
    assert _allowed_after([S, NP, XX]) == {S, NP, VP, XX, CLOSE}
    assert _allowed_after(gold[:9]) == {CLOSE}  # every word placed: only closing is left
    assert _allowed_after(gold[:10]) == {EOS_ID}  # the root is closed: only EOS
    for step in range(len(gold)):
        assert gold[step] in _allowed_after(gold[:step]), step
    assert WORD_PIECE not in set().union(*(_allowed_after(gold[:step]) for step in range(len(gold))))


def test_the_root_closes_only_after_the_last_word():
    assert CLOSE not in _allowed_after([S, NP, XX, CLOSE])  # depth 1, two words left


def test_room_forbids_what_could_not_be_finished_in_time():
    # After "(S XX", 3 words are left: XX needs 2 XX + ")" + EOS after it, an opening
    # 3 XX + 2 ")" + EOS.
    assert _allowed_after([S, XX], room=3) == set()
    assert _allowed_after([S, XX], room=4) == {XX}
    assert _allowed_after([S, XX], room=6) == {S, NP, VP, XX}
    assert _allowed_after([S, XX, XX, XX, XX], room=0) == set()  # ")" needs EOS after it
    assert _allowed_after([S, XX, XX, XX, XX], room=1) == {CLOSE}


def test_at_most_two_constituents_per_word():
    opened = [S, NP, NP, NP, XX, NP, NP, NP, NP]  # 8 constituents for 4 words
    assert _allowed_after(opened) == {XX}
    assert _allowed_after(opened[:-1]) == {S, NP, VP, XX}


def test_at_most_six_constituents_opened_in_a_row():
    """The treebank never opens more than 6 constituents without a word between them."""
    assert _allowed_after([S] + [NP] * 4) == {S, NP, VP, XX}
    assert _allowed_after([S] + [NP] * 5) == {XX}
    assert _allowed_after([S] + [NP] * 5 + [XX]) >= {S, NP, VP}  # a word resets the run


LABELLED = TARGET + ["▁)S", "▁)NP", "▁)VP"]
CLOSE_S, CLOSE_NP, CLOSE_VP = 9, 10, 11


def _allowed_with_closing_labels(tokens):
    token_filter = TreeFilter(Vocabularies(PieceList(SOURCE), PieceList(LABELLED)), closing_labels=True)
    state = token_filter.initial_state(tf.constant([SENTENCE]), 1)
    for token in tokens:
        state = token_filter.update(state, tf.constant([token]))
    allowed = token_filter.allowed(state, tf.constant([100]))[0].numpy()
    return {token for token in range(len(LABELLED)) if allowed[token]}


def test_closing_labels_close_the_innermost_open_constituent_only():
    gold = [S, NP, XX, XX, CLOSE_NP, VP, XX, CLOSE_VP, XX, CLOSE_S, EOS_ID]
    for step in range(len(gold)):
        assert gold[step] in _allowed_with_closing_labels(gold[:step]), step
    assert _allowed_with_closing_labels([S, NP, XX]) == {S, NP, VP, XX, CLOSE_NP}  # not ")", ")S" or ")VP"
    assert _allowed_with_closing_labels([S, NP, VP, XX, CLOSE_VP]) == {S, NP, VP, XX, CLOSE_NP}  # the label below
    assert _allowed_with_closing_labels(gold[:9]) == {CLOSE_S}
    # Unlabelled, the same vocabulary's labelled closings are closings of any constituent.
    token_filter = TreeFilter(Vocabularies(PieceList(SOURCE), PieceList(LABELLED)))
    state = token_filter.initial_state(tf.constant([SENTENCE]), 1)
    for token in (S, NP, XX):
        state = token_filter.update(state, tf.constant([token]))
    assert token_filter.allowed(state, tf.constant([100]))[0].numpy()[[CLOSE, CLOSE_S, CLOSE_NP, CLOSE_VP]].all()


def _replaying(logits, beam_size):
    """A step function giving each hypothesis its row of `logits` [steps, B * K, V] at each
    step, found by its sentence's number (the sentence_state) as sentences leave the search."""
    def step(ids, index, state, sentences):
        by_sentence = tf.reshape(logits[index], [-1, beam_size, logits.shape[-1]])
        return tf.reshape(tf.gather(by_sentence, sentences), [-1, logits.shape[-1]]), state

    return step


@pytest.mark.parametrize("extra_length, closing_labels", [(3, False), (6, False), (40, False), (3, True), (40, True)])
def test_beam_search_under_the_filter_gives_trees_over_exactly_the_words(extra_length, closing_labels):
    """Random logits, a batch of sentences of different lengths, room from tight (the flat
    tree is the only fit: 2 + words + ... tokens) to ample: every hypothesis is a tree (with
    `closing_labels`, one whose every ")LABEL" names what it closes)."""
    sentences = tf.constant([[3, 4, 5, 6, 7, 1], [3, 1, 0, 0, 0, 0], [3, 5, 7, 1, 0, 0]])
    words = [["The", "cat", "sats", "."], ["The"], ["The", "sat", "."]]
    beam_size, batch = 4, 3
    target = LABELLED if closing_labels else TARGET
    token_filter = TreeFilter(Vocabularies(PieceList(SOURCE), PieceList(target)), closing_labels=closing_labels)
    logits = tf.random.stateless_normal([64, batch * beam_size, len(target)], seed=[1, 2], stddev=3.0)
    max_lengths = tf.constant([len(w) for w in words]) + extra_length
    result = beam_search(
        _replaying(logits, beam_size), (), batch, beam_size, 0.3, max_lengths, EOS_ID,
        token_filter=token_filter, filter_state=token_filter.initial_state(sentences, beam_size),
        sentence_state=tf.range(batch), n_best=beam_size,
    )
    outcomes = zip(words, result.ids.numpy(), result.lengths.numpy(), result.scores.numpy(), max_lengths.numpy())
    for sentence_words, ids, lengths, scores, limit in outcomes:
        assert scores[0] > -1e8  # (a tight limit may leave fewer trees than beams: the rest score -1e9)
        for hypothesis, length in zip(ids[scores > -1e8], lengths[scores > -1e8]):
            assert hypothesis[length - 1] == EOS_ID and length <= limit
            text = " ".join(target[t][1:] for t in hypothesis[: length - 1])
            tree, repairs = restore(text, sentence_words)
            assert repairs.total == 0, text
            assert (")" in text.split()) != closing_labels  # the root's ")" at least, or never
            assert tree.leaves() == sentence_words


SHARED = ["<pad>", "</s>", "<unk>", "▁(S", "▁(NP", "▁)", "▁The", "▁cat", "▁sat", "s", "▁."]


@pytest.mark.parametrize("extra_length", [2, 40])
def test_copy_words_mode_copies_the_source_pieces_in_order(extra_length):
    """With the words in the targets, hypotheses spell exactly the source's pieces (never a
    bracket inside a word) between well-formed brackets."""
    vocabularies = Vocabularies(PieceList(SHARED), PieceList(SHARED))
    token_filter = TreeFilter(vocabularies, copy_words=True)
    sentences = tf.constant([[6, 7, 8, 9, 10, 1], [6, 1, 0, 0, 0, 0]])  # "The cat sats ." and "The"
    words = [["The", "cat", "sats", "."], ["The"]]
    beam_size, batch = 3, 2
    logits = tf.random.stateless_normal([64, batch * beam_size, len(SHARED)], seed=[3, 4], stddev=3.0)
    max_lengths = tf.constant([5, 1]) + extra_length + 2  # pieces + a root's two brackets + EOS at the tightest
    result = beam_search(
        _replaying(logits, beam_size), (), batch, beam_size, 0.3, max_lengths, EOS_ID,
        token_filter=token_filter, filter_state=token_filter.initial_state(sentences, beam_size),
        sentence_state=tf.range(batch), n_best=beam_size,
    )
    for sentence_words, ids, lengths, scores in zip(words, result.ids.numpy(), result.lengths.numpy(), result.scores.numpy()):
        assert scores[0] > -1e8
        for hypothesis, length in zip(ids[scores > -1e8], lengths[scores > -1e8]):
            pieces = [SHARED[t] for t in hypothesis[: length - 1]]
            text = "".join(pieces).replace("▁", " ").strip()
            tree, repairs = restore(words_to_placeholders(text), sentence_words)
            assert repairs.total == 0 and tree.leaves() == sentence_words, text
            assert " ".join(t for t in text.split() if t != ")" and not t.startswith("(")) == " ".join(sentence_words)

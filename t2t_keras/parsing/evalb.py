"""Labelled bracket scoring that reproduces EVALB (Sekine and Collins) with its parameter files.

The rules, set by an EVALB parameter file (`read_params`: COLLINS.prm by default; new.prm, of
EVALB's 2006 fix, is built in too):
  * each tree is read on its own, by its own tags: a word whose tag is a DELETE_LABEL is
    removed (COLLINS.prm: -NONE- and the punctuation tags , : `` '' .); every constituent is a
    bracket (label, first word, last word) over the words left, and is not counted if it
    covers no word or if its label, less function tags and indices (NP-SBJ-1 = NP), is a
    DELETE_LABEL (TOP);
  * then both trees must have the same words (EQ_WORD pairs are the same word). If not, the
    sentence is an error and is not scored: a test tree that tags a comma NN keeps a word the
    gold tree removed, a length mismatch. Before giving up, new.prm puts back a quote-like word
    (' " or /) that one tree removed and the other kept, at the same place, under another
    QUOTE_LABEL tag (a possessive ' tagged '' instead of POS), with the brackets around it.
    A test tree with no word left is skipped, not scored either;
  * brackets match one to one, in span and label (EQ_LABEL pairs are the same: ADVP = PRT),
    or with LABELED 0 in span only; recall, precision, F1 and exact match are over the scored
    sentences;
  * a sentence's length (for the CUTOFF_LEN summary) counts the gold words whose tag is not a
    DELETE_LABEL_FOR_LENGTH (-NONE-); that summary counts its own errors and skips;
  * EVALB stops, without a summary, at error sentence MAX_ERROR + 2: a UsageError here.

Two readings of ours: an unlabelled root "( (S ...))" or ROOT is TOP (the wrapper tgrep
writes); and a test tag XX (the decoder's placeholder: tagging-free output) is the gold tag of
that word, as if the gold tags had been put back before running EVALB.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import TYPE_CHECKING, Iterable

from t2t_keras.errors import UsageError
from t2t_keras.parsing.evalb_params import EvalbParams, default_params
from t2t_keras.parsing.trees import PLACEHOLDER, ROOT_LABELS, is_preterminal

if TYPE_CHECKING:
    from nltk import Tree

QUOTE_WORDS = frozenset({"'", '"', "/"})  # the only words new.prm's QUOTE_LABEL repair puts back
FUNCTION_TAG = re.compile("[-=]")  # a bracket label ends at the first - or =


@dataclasses.dataclass
class SentenceScore:
    length: int  # gold words but DELETE_LABEL_FOR_LENGTH ones: decides the CUTOFF_LEN summary
    gold: int = 0
    test: int = 0
    matched: int = 0
    error: str | None = None  # why EVALB could not score it, e.g. "length mismatch (6|7)"
    skipped: bool = False  # the test tree has no word left

    @property
    def scored(self) -> bool:
        return self.error is None and not self.skipped

    @property
    def exact(self) -> bool:
        return self.matched == self.gold == self.test


@dataclasses.dataclass
class EvalbResult:
    sentences: int  # scored
    errors: int  # not scored: gold and test words differ
    skipped: int  # not scored: no test word left
    recall: float
    precision: float
    f1: float
    exact_match: float

    def format(self) -> str:
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return (
            f"F1 {self.f1:.2f}  recall {self.recall:.2f}  precision {self.precision:.2f}  "
            f"exact {self.exact_match:.2f}  ({self.sentences} sentences, {self.errors} errors{skipped})"
        )


@dataclasses.dataclass
class _Bracket:
    label: str
    start: int  # the span over the tree's words left: [start, end)
    end: int


@dataclasses.dataclass
class _QuoteWord:
    """A quote-like word under a QUOTE_LABEL tag, and what putting it back shifts."""

    word: str
    tag: str
    position: int  # words left before it
    brackets_before: int  # brackets opened before it; the later ones follow it
    enclosing: list[int]  # the brackets open around it


@dataclasses.dataclass
class _Reading:
    """A tree as EVALB reads it: the words left, the brackets in opening order, the quote words."""

    words: list[str]
    brackets: list[_Bracket]
    quote_words: list[_QuoteWord]

    def put_back(self, number: int) -> None:
        """Re-inserts quote word `number` inside its brackets; it and the later quote words
        move one on (as in EVALB, whose later matching sees these positions)."""
        quote = self.quote_words[number]
        self.words.insert(quote.position, quote.word)
        for bracket in self.brackets[quote.brackets_before :]:
            bracket.start += 1
            bracket.end += 1
        for index in quote.enclosing:
            self.brackets[index].end += 1
        for later in self.quote_words[number:]:
            later.position += 1


def _terminals(tree: Tree) -> list[tuple[str, str]]:
    """(word, tag) of every leaf, in order."""
    return [(leaf[0], leaf.label()) for leaf in tree.subtrees(is_preterminal)]


def _has_loose_words(tree: Tree) -> bool:
    """Whether a word stands outside a (TAG word) leaf, which EVALB cannot read."""
    return any(isinstance(child, str) for node in tree.subtrees(lambda t: not is_preterminal(t)) for child in node)


def _read(tree: Tree, tags: list[str], params: EvalbParams) -> _Reading:
    """`tree` as EVALB reads it, with `tags` (one per leaf) as its part-of-speech tags."""
    reading = _Reading([], [], [])
    leaf_tags = iter(tags)
    open_brackets: list[int] = []

    def walk(node: Tree, label: str) -> None:
        if is_preterminal(node):
            word, tag = node[0], next(leaf_tags)
            if tag in params.quote_labels and word in QUOTE_WORDS:
                reading.quote_words.append(
                    _QuoteWord(word, tag, len(reading.words), len(reading.brackets), list(open_brackets))
                )
            if tag not in params.delete_labels:
                reading.words.append(word)
            return
        number = len(reading.brackets)
        reading.brackets.append(_Bracket(label, len(reading.words), len(reading.words)))
        open_brackets.append(number)
        for child in node:
            walk(child, child.label())
        open_brackets.pop()
        reading.brackets[number].end = len(reading.words)

    walk(tree, "TOP" if tree.label() in ROOT_LABELS else tree.label())
    return reading


def _test_tags(gold: list[tuple[str, str]], test: list[tuple[str, str]], params: EvalbParams) -> list[str]:
    """The test tree's tags, each placeholder XX made the gold tag of its word. The words that
    count for length are paired in order, if they are the same words; else XX stays a tag."""
    tags = [tag for _, tag in test]
    if PLACEHOLDER not in tags:
        return tags
    gold_words = [(word, tag) for word, tag in gold if tag not in params.delete_labels_for_length]
    test_positions = [i for i, (_, tag) in enumerate(test) if tag not in params.delete_labels_for_length]
    pairs = list(zip(test_positions, gold_words))
    if len(gold_words) == len(test_positions) and all(params.same_word(test[i][0], word) for i, (word, _) in pairs):
        for i, (_, gold_tag) in pairs:
            if tags[i] == PLACEHOLDER:
                tags[i] = gold_tag
    return tags


def _put_back_quote_words(gold: _Reading, test: _Reading, params: EvalbParams) -> None:
    """new.prm's repair of a length mismatch: a quote word one tree removed and the other kept
    at the same position, under a different QUOTE_LABEL tag, goes back into the tree that
    removed it. EVALB's order: each test quote word, against each gold quote word."""
    for test_number, test_quote in enumerate(test.quote_words):
        position = test_quote.position
        for gold_number, gold_quote in enumerate(gold.quote_words):
            if gold_quote.position != position or gold_quote.tag == test_quote.tag:
                continue
            gold_removed, test_removed = gold_quote.tag in params.delete_labels, test_quote.tag in params.delete_labels
            if gold_removed and not test_removed:
                gold.put_back(gold_number)
            elif test_removed and not gold_removed:
                test.put_back(test_number)


def _scored_brackets(brackets: list[_Bracket], params: EvalbParams) -> list[_Bracket]:
    """The brackets EVALB counts: over a word at least, labels less function tags and indices,
    not a DELETE_LABEL."""
    scored = []
    for bracket in brackets:
        label = FUNCTION_TAG.split(bracket.label, maxsplit=1)[0]
        deleted = any(params.same_label(label, deleted_label) for deleted_label in params.delete_labels)
        if bracket.end > bracket.start and not deleted:
            scored.append(_Bracket(label, bracket.start, bracket.end))
    return scored


def _matches(gold: list[_Bracket], test: list[_Bracket], params: EvalbParams) -> int:
    """How many gold brackets match a test bracket, one to one: each takes the first test
    bracket left with its span (and label, if LABELED), as EVALB does."""
    unmatched = collections.defaultdict(list)  # span -> labels of the test brackets not matched yet
    for bracket in test:
        unmatched[bracket.start, bracket.end].append(bracket.label)
    matched = 0
    for bracket in gold:
        labels = unmatched[bracket.start, bracket.end]
        for index, label in enumerate(labels):
            if not params.labeled or params.same_label(bracket.label, label):
                del labels[index]
                matched += 1
                break
    return matched


def score_sentence(gold: Tree, test: Tree, params: EvalbParams | None = None) -> SentenceScore:
    """EVALB's counts for one sentence, or why it is not scored (the module docstring's rules)."""
    params = params or default_params()
    gold_terminals, test_terminals = _terminals(gold), _terminals(test)
    length = sum(tag not in params.delete_labels_for_length for _, tag in gold_terminals)
    for name, tree in (("gold", gold), ("test", test)):
        if _has_loose_words(tree):
            return SentenceScore(length, error=f"the {name} tree has a word outside a (TAG word) leaf")
    gold_reading = _read(gold, [tag for _, tag in gold_terminals], params)
    test_reading = _read(test, _test_tags(gold_terminals, test_terminals, params), params)
    if not test_reading.words:
        return SentenceScore(length, skipped=True)
    if len(gold_reading.words) != len(test_reading.words):
        _put_back_quote_words(gold_reading, test_reading, params)
        if len(gold_reading.words) != len(test_reading.words):
            return SentenceScore(length, error=f"length mismatch ({len(gold_reading.words)}|{len(test_reading.words)})")
    for gold_word, test_word in zip(gold_reading.words, test_reading.words):
        if not params.same_word(gold_word, test_word):
            return SentenceScore(length, error=f"words mismatch ({gold_word}|{test_word})")
    gold_brackets = _scored_brackets(gold_reading.brackets, params)
    test_brackets = _scored_brackets(test_reading.brackets, params)
    return SentenceScore(length, len(gold_brackets), len(test_brackets), _matches(gold_brackets, test_brackets, params))


def score_sentences(pairs: Iterable[tuple[Tree, Tree]], params: EvalbParams | None = None) -> list[SentenceScore]:
    """Every (gold, test) pair's score; a UsageError where EVALB stops (error MAX_ERROR + 2)."""
    params = params or default_params()
    scores, errors = [], 0
    for number, (gold, test) in enumerate(pairs, 1):
        score = score_sentence(gold, test, params)
        errors += score.error is not None
        if errors > params.max_error + 1:
            raise UsageError(
                f"sentence {number}: {score.error}; EVALB stops at this error sentence, number {errors} "
                f"(MAX_ERROR {params.max_error} + 2): are the trees aligned? To score anyway, give a parameter "
                "file with a higher MAX_ERROR."
            )
        scores.append(score)
    return scores


def summarize(scores: list[SentenceScore], max_length: int | None = None) -> EvalbResult:
    """Corpus recall / precision / F1 / exact match (percentages) of the scored sentences, of
    all or of those of at most `max_length` words."""
    counted = [s for s in scores if max_length is None or s.length <= max_length]
    scored = [s for s in counted if s.scored]
    gold = sum(s.gold for s in scored)
    test = sum(s.test for s in scored)
    matched = sum(s.matched for s in scored)
    recall = 100.0 * matched / gold if gold else 0.0
    precision = 100.0 * matched / test if test else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    exact = 100.0 * sum(s.exact for s in scored) / len(scored) if scored else 0.0
    errors = sum(s.error is not None for s in counted)
    return EvalbResult(len(scored), errors, sum(s.skipped for s in counted), recall, precision, f1, exact)


def evaluate(
    pairs: Iterable[tuple[Tree, Tree]], max_length: int | None = None, params: EvalbParams | None = None
) -> EvalbResult:
    """EVALB's summary of (gold, test) trees: all sentences, or those of at most `max_length` words."""
    return summarize(score_sentences(pairs, params), max_length)


def evaluate_all_and_short(
    gold_trees: list[Tree], test_trees: list[Tree], params: EvalbParams | None = None
) -> dict[str, EvalbResult]:
    """EVALB's two summaries: all sentences, and those of at most CUTOFF_LEN (40) words."""
    params = params or default_params()
    scores = score_sentences(zip(gold_trees, test_trees), params)
    return {"all": summarize(scores), f"len<={params.cutoff_length}": summarize(scores, params.cutoff_length)}


def evalb_score(gold_trees: list[Tree], test_trees: list[Tree], params: EvalbParams | None = None):
    """EVALB F1 of all sentences as a `bleu.Score`, reporting both summaries: what the trainer,
    the decoder and t2t-keras-evalb report."""
    from t2t_keras.evaluation.bleu import Score

    results = evaluate_all_and_short(gold_trees, test_trees, params)
    return Score(results["all"].f1, "\n".join(f"EVALB {name}: {result.format()}" for name, result in results.items()))

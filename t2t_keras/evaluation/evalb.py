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
import functools
import os
import re
from typing import Iterable

from nltk import Tree

from t2t_keras import files
from t2t_keras.errors import UsageError
from t2t_keras.parsing.trees import PLACEHOLDER, ROOT_LABELS, is_preterminal

DEFAULT_PARAMS = "COLLINS.prm"
QUOTE_WORDS = frozenset({"'", '"', "/"})  # the only words new.prm's QUOTE_LABEL repair puts back
FUNCTION_TAG = re.compile("[-=]")  # a bracket label ends at the first - or =


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter file; a key the file leaves out keeps EVALB's default."""

    max_error: int = 10
    cutoff_length: int = 40
    labeled: bool = True
    delete_labels: frozenset[str] = frozenset()
    delete_labels_for_length: frozenset[str] = frozenset()
    quote_labels: frozenset[str] = frozenset()
    equal_labels: frozenset[frozenset[str]] = frozenset()  # EQ_LABEL pairs
    equal_words: frozenset[frozenset[str]] = frozenset()  # EQ_WORD pairs

    def same_label(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) in self.equal_labels

    def same_word(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) in self.equal_words


# Parameter file key -> (EvalbParams field, kind of value). DEBUG only changes the C program's
# printout: it is checked, not kept.
PARAM_KEYS = {
    "DEBUG": (None, "number"),
    "MAX_ERROR": ("max_error", "number"),
    "CUTOFF_LEN": ("cutoff_length", "number"),
    "LABELED": ("labeled", "0 or 1"),
    "DELETE_LABEL": ("delete_labels", "label"),
    "DELETE_LABEL_FOR_LENGTH": ("delete_labels_for_length", "label"),
    "QUOTE_LABEL": ("quote_labels", "label"),
    "EQ_LABEL": ("equal_labels", "pair"),
    "EQ_WORD": ("equal_words", "pair"),
}


# EVALB's own two parameter files, by name: their settings in their format (the text is ours).
BUILT_IN_PARAMS = {
    "COLLINS.prm": """\
# EVALB's COLLINS.prm: the scoring of Collins (ACL 1997), the standard one.
DEBUG 0
MAX_ERROR 10
CUTOFF_LEN 40
LABELED 1
# Not scored: the root, empty elements and punctuation (words and all).
DELETE_LABEL TOP
DELETE_LABEL -NONE-
DELETE_LABEL ,
DELETE_LABEL :
DELETE_LABEL ``
DELETE_LABEL ''
DELETE_LABEL .
DELETE_LABEL_FOR_LENGTH -NONE-
EQ_LABEL ADVP PRT
""",
    "new.prm": """\
# EVALB's new.prm, of its 2006 fix (David Ellis): COLLINS.prm, plus S1 (Charniak's root) and
# ? ! (Bikel's tags) not scored, and quote words put back under these QUOTE_LABEL tags.
DEBUG 0
MAX_ERROR 10
CUTOFF_LEN 40
LABELED 1
DELETE_LABEL TOP
DELETE_LABEL S1
DELETE_LABEL -NONE-
DELETE_LABEL ,
DELETE_LABEL :
DELETE_LABEL ``
DELETE_LABEL ''
DELETE_LABEL .
DELETE_LABEL ?
DELETE_LABEL !
DELETE_LABEL_FOR_LENGTH -NONE-
QUOTE_LABEL ``
QUOTE_LABEL ''
QUOTE_LABEL POS
# Less common, but output by parsers.
QUOTE_LABEL NN
QUOTE_LABEL CD
QUOTE_LABEL VBZ
QUOTE_LABEL :
EQ_LABEL ADVP PRT
""",
}


def read_params(path: str = DEFAULT_PARAMS, flag: str | None = None) -> EvalbParams:
    """The settings of an EVALB parameter file: a path, or COLLINS.prm / new.prm (EVALB's own,
    built in) when no such file exists."""
    where = f"{flag}={path}" if flag else path
    if files.isfile(path):
        return parse_params(files.read_bytes(path).decode("utf-8", errors="replace"), where)
    if path in BUILT_IN_PARAMS:
        return parse_params(BUILT_IN_PARAMS[path], where)
    raise UsageError(f"{where}: no such file; give a path or one of EVALB's own: {', '.join(BUILT_IN_PARAMS)}.")


@functools.cache
def default_params() -> EvalbParams:
    return read_params(DEFAULT_PARAMS)


def parse_params(text: str, where: str) -> EvalbParams:
    """The settings of parameter file text: "KEY value" lines and # comments, as EVALB reads
    them; a UsageError names `where` and the line of anything else."""
    settings: dict = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        try:
            _set_param(settings, fields[0], fields[1:])
        except ValueError as e:
            raise UsageError(f"{where}:{number}: {e}") from None
    return EvalbParams(**settings)


def _set_param(settings: dict, key: str, values: list[str]) -> None:
    """Adds one parameter line to `settings` (EvalbParams fields); ValueError says what is wrong."""
    if key not in PARAM_KEYS:
        raise ValueError(f"unknown key {key} (EVALB's keys: {' '.join(PARAM_KEYS)}).")
    field, kind = PARAM_KEYS[key]
    wanted = 2 if kind == "pair" else 1
    if len(values) != wanted:
        raise ValueError(f"{key} takes {wanted} value{'s' if wanted > 1 else ''}, not {len(values)}.")
    if kind == "label":
        settings[field] = settings.get(field, frozenset()) | {values[0]}
    elif kind == "pair":
        settings[field] = settings.get(field, frozenset()) | {frozenset(values)}
    elif not values[0].isdigit() or (kind == "0 or 1" and values[0] not in ("0", "1")):
        raise ValueError(f"{key} takes {'a whole number' if kind == 'number' else kind}, not {values[0]}.")
    elif field:
        settings[field] = values[0] == "1" if kind == "0 or 1" else int(values[0])


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


def read_trees(path: str, flag: str | None = None) -> list[Tree]:
    """The bracketed trees of a file, one or many lines each (one per line, or .mrg style)."""
    where = f"{flag}={path}" if flag else path
    if not files.isfile(path):
        raise UsageError(f"{where}: no such file.")
    text = files.read_bytes(path).decode("utf-8", errors="replace")
    trees, depth, start, start_line, line = [], 0, None, 0, 1
    for index, char in enumerate(text):
        if char == "\n":
            line += 1
        elif char == "(":
            if depth == 0:
                start, start_line = index, line
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise UsageError(f"{where}:{line}: ')' closes nothing; the file is not bracketed trees.")
            if depth == 0:
                trees.append(_parse(text[start : index + 1], where, start_line))
        elif depth == 0 and not char.isspace():
            raise UsageError(f"{where}:{line}: text outside brackets; expected one bracketed tree after another.")
    if depth:
        raise UsageError(f"{where}:{start_line}: the tree starting here is never closed.")
    return trees


def _parse(text: str, where: str, line: int) -> Tree:
    try:
        return Tree.fromstring(text)
    except ValueError as e:
        raise UsageError(f"{where}:{line}: malformed tree ({str(e).splitlines()[0]}).") from None

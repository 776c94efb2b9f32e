"""Labelled bracket scoring with the rules of EVALB's standard COLLINS.prm.

The rules (Sekine and Collins' EVALB, parameter file COLLINS.prm):
  * a bracket is (label, first word, last word) of a constituent above the part-of-speech
    level; brackets are matched as multisets;
  * words tagged -NONE- are removed; punctuation (tags , : `` '' .) is removed from the
    spans too, and a bracket left with no word is not counted;
  * labels lose function tags and indices (NP-SBJ-1 = NP); TOP (the root wrapper) is not
    counted; ADVP and PRT are the same label;
  * sentence length (for the <= 40 words figures) counts every word but -NONE-.

Tagging-free: decoded trees carry the XX placeholder instead of tags, so which words are
punctuation is decided by the gold tree's tags, word by word.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Iterable

from nltk import Tree

from t2t_keras.errors import UsageError
from t2t_keras.parsing.trees import ROOT_LABELS, is_preterminal, remove_empty_elements

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
EQUIVALENT_LABELS = {"PRT": "ADVP"}
CUTOFF_LENGTH = 40


@dataclasses.dataclass
class SentenceScore:
    length: int
    gold: int
    test: int
    matched: int

    @property
    def exact(self) -> bool:
        return self.matched == self.gold == self.test


@dataclasses.dataclass
class EvalbResult:
    sentences: int
    errors: int  # sentences skipped because gold and test words differ
    recall: float
    precision: float
    f1: float
    exact_match: float

    def format(self) -> str:
        return (
            f"F1 {self.f1:.2f}  recall {self.recall:.2f}  precision {self.precision:.2f}  "
            f"exact {self.exact_match:.2f}  ({self.sentences} sentences, {self.errors} errors)"
        )


def _terminals(tree: Tree) -> list[tuple[str, str]]:
    """(word, tag) of every leaf, in order."""
    return [(leaf[0], leaf.label()) for leaf in tree.subtrees(is_preterminal)]


def _brackets(tree: Tree | None, kept: list[bool]) -> collections.Counter:
    """The multiset of (label, start, end) over kept words of a `remove_empty_elements` tree;
    `kept` is per leaf. A tree with no word left (None) has none."""
    if tree is None:
        return collections.Counter()
    positions = []  # leaf index -> position among kept words (start of the span)
    count = 0
    for keep in kept:
        positions.append(count)
        count += keep
    brackets: collections.Counter = collections.Counter()

    def walk(node, first_leaf: int) -> int:
        """Adds the brackets of `node` (whose first leaf is `first_leaf`); returns its leaf count."""
        if is_preterminal(node):
            return 1
        leaves = 0
        for child in node:
            leaves += walk(child, first_leaf + leaves)
        label = node.label() if node.label() not in ROOT_LABELS else "TOP"  # function tags already stripped
        start = positions[first_leaf]
        end = sum(kept[first_leaf : first_leaf + leaves]) + start
        if label not in DELETE_LABELS and end > start:
            brackets[(EQUIVALENT_LABELS.get(label, label), start, end)] += 1
        return leaves

    walk(tree, 0)
    return brackets


def score_sentence(gold: Tree, test: Tree) -> SentenceScore | None:
    """Bracket counts of one sentence; None if the words differ (an EVALB "error" sentence)."""
    gold_terminals = [t for t in _terminals(gold) if t[1] != "-NONE-"]
    test_terminals = [t for t in _terminals(test) if t[1] != "-NONE-"]
    if [w for w, _ in gold_terminals] != [w for w, _ in test_terminals]:
        return None
    kept = [tag not in DELETE_LABELS for _, tag in gold_terminals]  # the gold tags decide punctuation
    gold_brackets = _brackets(remove_empty_elements(gold), kept)
    test_brackets = _brackets(remove_empty_elements(test), kept)
    length = len(gold_terminals)  # COLLINS.prm's DELETE_LABEL_FOR_LENGTH (-NONE-) is already out
    matched = sum((gold_brackets & test_brackets).values())
    return SentenceScore(length, sum(gold_brackets.values()), sum(test_brackets.values()), matched)


def evaluate(pairs: Iterable[tuple[Tree, Tree]], max_length: int | None = None) -> EvalbResult:
    """Corpus recall / precision / F1 / exact match (percentages) over (gold, test) trees."""
    scores, errors = [], 0
    for gold, test in pairs:
        score = score_sentence(gold, test)
        if score is None:
            errors += 1
        elif max_length is None or score.length <= max_length:
            scores.append(score)
    gold = sum(s.gold for s in scores)
    test = sum(s.test for s in scores)
    matched = sum(s.matched for s in scores)
    recall = 100.0 * matched / gold if gold else 0.0
    precision = 100.0 * matched / test if test else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    exact = 100.0 * sum(s.exact for s in scores) / len(scores) if scores else 0.0
    return EvalbResult(len(scores), errors, recall, precision, f1, exact)


def evaluate_all_and_short(gold_trees: list[Tree], test_trees: list[Tree]) -> dict[str, EvalbResult]:
    """EVALB's two summaries: all sentences, and sentences of at most 40 words."""
    pairs = list(zip(gold_trees, test_trees))
    return {"all": evaluate(pairs), f"len<={CUTOFF_LENGTH}": evaluate(pairs, CUTOFF_LENGTH)}


def evalb_score(gold_trees: list[Tree], test_trees: list[Tree]):
    """EVALB F1 of all sentences as a `bleu.Score`, reporting both summaries: what the trainer,
    the decoder and t2t-keras-evalb report."""
    from t2t_keras.evaluation.bleu import Score

    results = evaluate_all_and_short(gold_trees, test_trees)
    return Score(results["all"].f1, "\n".join(f"EVALB {name}: {result.format()}" for name, result in results.items()))


def read_trees(path: str, flag: str | None = None) -> list[Tree]:
    """The bracketed trees of a file, one or many lines each (one per line, or .mrg style)."""
    where = f"{flag}={path}" if flag else path
    if not os.path.isfile(path):
        raise UsageError(f"{where}: no such file.")
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
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

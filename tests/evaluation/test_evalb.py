"""EVALB (COLLINS.prm) bracket scoring on hand-made pairs whose counts are written out."""

import subprocess
import sys

import pytest
from nltk import Tree

from t2t_keras.errors import UsageError
from t2t_keras.evaluation.evalb import evaluate, read_trees, score_sentence
from tests.testing import assert_one_line_error

# Gold brackets (punctuation "." removed from spans): S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6).
GOLD = Tree.fromstring("(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))")
MISSING_PP = Tree.fromstring("(S (NP (XX The) (XX cat)) (VP (XX sat) (XX on) (NP (XX the) (XX mat))) (XX .))")
WRONG_LABEL = Tree.fromstring("(S (ADJP (XX The) (XX cat)) (VP (XX sat) (PP (XX on) (NP (XX the) (XX mat)))) (XX .))")
# S(0,3) NP(0,1) VP(1,3) PRT(2,3); the test says ADVP, which COLLINS.prm equates with PRT.
GOLD_PRT = Tree.fromstring("(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .))")
TEST_ADVP = Tree.fromstring("(S (NP (XX He)) (VP (XX gave) (ADVP (XX up))) (XX .))")
# S(0,2) NP(0,1) VP(1,2); the test attaches "." inside VP and puts a bracket around "," alone.
GOLD_PUNCT = Tree.fromstring("(S (NP (NNP John)) (, ,) (VP (VBD left)) (. .))")
TEST_PUNCT = Tree.fromstring("(S (NP (XX John)) (PRN (XX ,)) (VP (XX left) (XX .)))")


def _counts(gold, test):
    score = score_sentence(gold, test)
    return score.gold, score.test, score.matched


def test_one_missing_bracket():
    assert _counts(GOLD, MISSING_PP) == (5, 4, 4)
    result = evaluate([(GOLD, MISSING_PP)])
    assert (result.recall, result.precision) == (80.0, 100.0)
    assert result.f1 == pytest.approx(2 * 80 * 100 / 180)
    assert result.exact_match == 0.0


def test_one_wrong_label():
    assert _counts(GOLD, WRONG_LABEL) == (5, 5, 4)
    result = evaluate([(GOLD, WRONG_LABEL)])
    assert (result.recall, result.precision, result.f1) == (80.0, 80.0, 80.0)


def test_advp_equals_prt():
    assert _counts(GOLD_PRT, TEST_ADVP) == (4, 4, 4)
    assert evaluate([(GOLD_PRT, TEST_ADVP)]).exact_match == 100.0


def test_punctuation_is_ignored_by_the_gold_tags():
    assert _counts(GOLD_PUNCT, TEST_PUNCT) == (3, 3, 3)  # PRN covers only "," : not a bracket


def test_corpus_totals_are_summed_counts_not_averaged_f1():
    pairs = [(GOLD, MISSING_PP), (GOLD, WRONG_LABEL), (GOLD_PRT, TEST_ADVP), (GOLD_PUNCT, TEST_PUNCT)]
    result = evaluate(pairs)
    # gold 5+5+4+3 = 17, test 4+5+4+3 = 16, matched 4+4+4+3 = 15; exact: the last two.
    assert result.recall == pytest.approx(100 * 15 / 17)
    assert result.precision == pytest.approx(100 * 15 / 16)
    assert result.f1 == pytest.approx(100 * 30 / 33)
    assert result.exact_match == 50.0 and result.sentences == 4


def test_empty_elements_function_tags_root_and_the_length_cutoff():
    raw_gold = Tree.fromstring("( (S (NP-SBJ (-NONE- *)) (VP (VB Go) (ADVP-DIR (RB home))) (. .)) )")
    test = Tree.fromstring("(S (VP (XX Go) (ADVP (XX home))) (XX .))")
    # Gold: the root wrapper (TOP) and the empty NP do not count; NP-SBJ / ADVP-DIR lose their tags.
    assert _counts(raw_gold, test) == (3, 3, 3)
    words = " ".join(f"(XX w{i})" for i in range(41))
    long_gold = Tree.fromstring(f"(S (NP {words.replace('XX', 'NN')}))")
    long_test = Tree.fromstring(f"(S {words})")
    assert evaluate([(long_gold, long_test), (GOLD, MISSING_PP)], max_length=40).sentences == 1
    assert evaluate([(long_gold, long_test), (GOLD, MISSING_PP)]).sentences == 2


def test_different_words_are_an_error_sentence_not_a_crash():
    other = Tree.fromstring("(S (NP (XX A) (XX dog)) (VP (XX sat)))")
    result = evaluate([(GOLD, other), (GOLD, GOLD)])
    assert (result.errors, result.sentences, result.f1) == (1, 1, 100.0)


def test_read_trees_one_per_line_or_mrg_style_and_errors(tmp_path):
    path = tmp_path / "trees"
    path.write_text("(S (NP (XX a)))\n( (S\n   (NP (DT b) )))\n")
    assert [t.leaves() for t in read_trees(str(path))] == [["a"], ["b"]]
    path.write_text("(S (NP (XX a)))\n(S (NP (XX b))\n")
    with pytest.raises(UsageError, match=r"trees:2: the tree starting here is never closed"):
        read_trees(str(path))
    path.write_text("(S (NP (XX a))) word\n")
    with pytest.raises(UsageError, match=r"trees:1: text outside brackets"):
        read_trees(str(path))


def test_cli(tmp_path):
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text("\n".join(t.pformat(margin=10**9) for t in (GOLD, GOLD, GOLD_PRT, GOLD_PUNCT)) + "\n")
    test.write_text("\n".join(t.pformat(margin=10**9) for t in (MISSING_PP, WRONG_LABEL, TEST_ADVP, TEST_PUNCT)) + "\n")
    result = subprocess.run([sys.executable, "-m", "t2t_keras.bin.evalb", f"--gold={gold}", f"--test={test}"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "EVALB all: F1 90.91  recall 88.24  precision 93.75  exact 50.00  (4 sentences, 0 errors)"
    )
    test.write_text(MISSING_PP.pformat(margin=10**9) + "\n")
    assert_one_line_error(
        subprocess.run([sys.executable, "-m", "t2t_keras.bin.evalb", f"--gold={gold}", f"--test={test}"],
                       capture_output=True, text=True),
        "error: --gold has 4 trees, --test has 1",
    )

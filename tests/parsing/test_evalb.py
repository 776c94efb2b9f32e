"""EVALB bracket scoring (COLLINS.prm, new.prm) on hand-made pairs whose counts are written out,
derived from EVALB's README rules and its parameter files."""

import subprocess
import sys

import pytest
from nltk import Tree

from t2t_keras.errors import UsageError
from t2t_keras.parsing.evalb import evalb_score, evaluate, evaluate_all_and_short, score_sentence
from t2t_keras.parsing.evalb_params import EvalbParams, parse_params, read_params
from t2t_keras.parsing.trees import is_preterminal, read_trees
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
COLLINS, NEW = read_params("COLLINS.prm"), read_params("new.prm")


def _counts(gold, test, params=None):
    score = score_sentence(gold, test, params)
    assert score.error is None and not score.skipped, score
    return score.gold, score.test, score.matched


def _tagged_as_gold(gold, test):
    """`test` with the gold tags on its leaves (the same words in the same order)."""
    tagged = test.copy(deep=True)
    for leaf, gold_leaf in zip(tagged.subtrees(is_preterminal), gold.subtrees(is_preterminal), strict=True):
        leaf.set_label(gold_leaf.label())
    return tagged


def _one_line(trees):
    return "\n".join(t.pformat(margin=10**9) for t in trees) + "\n"


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


def _evalb(*flags):
    return subprocess.run([sys.executable, "-m", "t2t_keras.bin.evalb", *flags], capture_output=True, text=True)


def test_cli(tmp_path):
    gold, test = tmp_path / "gold", tmp_path / "test"
    golds, tests = (GOLD, GOLD, GOLD_PRT, GOLD_PUNCT), (MISSING_PP, WRONG_LABEL, TEST_ADVP, TEST_PUNCT)
    gold.write_text(_one_line(golds))
    expected = [
        "EVALB all: F1 90.91  recall 88.24  precision 93.75  exact 50.00  (4 sentences, 0 errors)",
        "EVALB len<=40: F1 90.91  recall 88.24  precision 93.75  exact 50.00  (4 sentences, 0 errors)",
    ]
    # The same output for placeholder tags and for the gold tags, and with either parameter file.
    tagged = [_tagged_as_gold(g, t) for g, t in zip(golds, tests)]
    for trees in (tests, tagged):
        test.write_text(_one_line(trees))
        result = _evalb(f"--gold={gold}", f"--test={test}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == expected
    for params in (COLLINS, NEW):
        assert evalb_score(list(golds), tagged, params).report.splitlines() == expected
    test.write_text(MISSING_PP.pformat(margin=10**9) + "\n")
    assert_one_line_error(_evalb(f"--gold={gold}", f"--test={test}"), "error: --gold has 4 trees, --test has 1")


# Test trees with part-of-speech tags that differ from the gold's. EVALB reads each tree by its
# own tags: a word tagged with a DELETE_LABEL is removed from that tree only.
PERIOD_AS_NN = Tree.fromstring("(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (NN .))")
COMMA_AS_NN = Tree.fromstring("(S (NP (NNP John)) (NN ,) (VP (VBD left)) (. .))")
PERIOD_AS_COLON = Tree.fromstring("(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (: .))")


def test_punctuation_tagged_as_a_word_is_a_length_mismatch_with_both_files():
    # Gold: "." is removed (tag .), 6 words; test: "." tagged NN stays, 7 words. new.prm puts back
    # only quote-like words (' " /), so both files count the sentence as an error, not scored.
    for params in (COLLINS, NEW):
        assert score_sentence(GOLD, PERIOD_AS_NN, params).error == "length mismatch (6|7)"
        # John left (2 words) against John , left (3).
        assert score_sentence(GOLD_PUNCT, COMMA_AS_NN, params).error == "length mismatch (2|3)"
    result = evaluate([(GOLD, PERIOD_AS_NN), (GOLD, MISSING_PP)])
    assert (result.sentences, result.errors, result.recall, result.precision) == (1, 1, 80.0, 100.0)


def test_punctuation_tagged_as_other_punctuation_is_removed_all_the_same():
    # "." tagged ":" is removed from the test tree too: the gold's 5 brackets, all matched.
    assert _counts(GOLD, PERIOD_AS_COLON, COLLINS) == _counts(GOLD, PERIOD_AS_COLON, NEW) == (5, 5, 5)


# A possessive ' (gold POS) that the test tags as a closing quote ''.
GOLD_POSSESSIVE = Tree.fromstring("(S (NP (NP (NNS Investors) (POS ')) (NN money)) (VP (VBD grew)) (. .))")
TEST_QUOTE = Tree.fromstring("(S (NP (NNS Investors)) ('' ') (NP (NN money)) (VP (VBD grew)) (. .))")
# Quotes (gold `` and '') of which the test tags the second one POS and brackets it with "site".
GOLD_QUOTES = Tree.fromstring("(S (NP (DT a) (`` ') (JJ perfect) ('' ') (NN site)) (VP (VBZ binds)) (. .))")
TEST_POS = Tree.fromstring("(S (NP (DT a) (`` ') (JJ perfect)) (NP (POS ') (NN site)) (VP (VBZ binds)) (. .))")


def test_new_prm_puts_a_quote_word_back_into_the_test_tree():
    # Gold: Investors ' money grew (4 words); brackets S(0,4) NP(0,3) NP(0,2) VP(3,4).
    # Test: '' removes ', 3 words: S(0,3) NP(0,1) NP(1,2) VP(2,3).
    assert score_sentence(GOLD_POSSESSIVE, TEST_QUOTE, COLLINS).error == "length mismatch (4|3)"
    # new.prm: ' is a quote word under QUOTE_LABELs in both trees (POS, ''), at position 1 in both,
    # removed by the test only: it goes back into the test at 1, inside S; the brackets after it
    # move on: S(0,4) NP(0,1) NP(2,3) VP(3,4). Matched: S and VP.
    assert _counts(GOLD_POSSESSIVE, TEST_QUOTE, NEW) == (4, 4, 2)


def test_new_prm_puts_a_quote_word_back_into_the_gold_tree():
    # Gold removes both ' (`` and ''): a perfect site binds, S(0,4) NP(0,3) VP(3,4).
    # Test removes the first only (``): a perfect ' site binds, S(0,5) NP(0,2) NP(2,4) VP(4,5).
    assert score_sentence(GOLD_QUOTES, TEST_POS, COLLINS).error == "length mismatch (4|5)"
    # new.prm: the first ' has the same tag in both trees: nothing to do. The second is at
    # position 2 in both, '' (removed) in the gold and POS (kept) in the test: it goes back into
    # the gold inside S and NP: S(0,5) NP(0,4) VP(4,5). Matched: S and VP.
    assert _counts(GOLD_QUOTES, TEST_POS, NEW) == (3, 4, 2)


def test_new_prm_removes_s1_and_question_marks():
    gold = Tree.fromstring("(TOP (SQ (VBZ Is) (NP (PRP it)) (ADJP (JJ true)) (. ?)))")
    s1_root = Tree.fromstring("(S1 (SQ (VBZ Is) (NP (PRP it)) (ADJP (JJ true)) (. ?)))")
    question_tag = Tree.fromstring("(S1 (SQ (VBZ Is) (NP (PRP it)) (ADJP (JJ true)) (? ?)))")
    # Gold: TOP is not counted; SQ(0,3) NP(1,2) ADJP(2,3). COLLINS.prm counts the test's S1(0,3).
    assert _counts(gold, s1_root, COLLINS) == (3, 4, 3)
    assert _counts(gold, s1_root, NEW) == (3, 3, 3)
    # "?" tagged ? stays with COLLINS.prm (4 words against 3); new.prm removes it.
    assert score_sentence(gold, question_tag, COLLINS).error == "length mismatch (3|4)"
    assert _counts(gold, question_tag, NEW) == (3, 3, 3)


def test_corpus_with_predicted_tags_per_parameter_file():
    pairs = [(GOLD, PERIOD_AS_NN), (GOLD_POSSESSIVE, TEST_QUOTE), (GOLD_QUOTES, TEST_POS), (GOLD, MISSING_PP)]
    # COLLINS.prm: three errors; MISSING_PP alone: 4 of 5 gold, 4 of 4 test.
    collins = evaluate(pairs, params=COLLINS)
    assert (collins.sentences, collins.errors, collins.recall, collins.precision) == (1, 3, 80.0, 100.0)
    # new.prm: one error; matched 2 + 2 + 4 = 8, gold 4 + 3 + 5 = 12, test 4 + 4 + 4 = 12.
    new = evaluate(pairs, params=NEW)
    assert (new.sentences, new.errors, new.exact_match) == (3, 1, 0.0)
    assert new.recall == new.precision == pytest.approx(100 * 8 / 12)


def test_a_test_tree_with_no_word_left_is_skipped():
    dash = Tree.fromstring("(S (: --))")  # its only word is removed (tag :)
    result = evaluate([(GOLD, GOLD), (dash, dash)])
    assert (result.sentences, result.errors, result.skipped, result.exact_match) == (1, 0, 1, 100.0)
    assert result.format().endswith("(1 sentences, 0 errors, 1 skipped)")


def test_errors_count_in_the_cutoff_summary_by_gold_length():
    words = " ".join(f"(NN w{i})" for i in range(41))
    long_gold, long_other = Tree.fromstring(f"(S {words})"), Tree.fromstring(f"(S {words} (NN extra))")
    results = evaluate_all_and_short([long_gold, GOLD], [long_other, PERIOD_AS_NN])
    assert (results["all"].errors, results["len<=40"].errors) == (2, 1)


def test_max_error_stops_where_evalb_stops():
    other = Tree.fromstring("(S (NP (XX A) (XX dog)) (VP (XX sat)))")
    # EVALB exits at error sentence MAX_ERROR + 2 (COLLINS.prm: the 12th), with no summary.
    assert evaluate([(GOLD, other)] * 11).errors == 11
    with pytest.raises(UsageError, match=r"sentence 12: length mismatch \(6\|3\); EVALB stops"):
        evaluate([(GOLD, other)] * 12)


def test_built_in_parameter_files_and_your_own(tmp_path):
    assert COLLINS.delete_labels == {"TOP", "-NONE-", ",", ":", "``", "''", "."}
    assert NEW.delete_labels == COLLINS.delete_labels | {"S1", "?", "!"}
    assert COLLINS.quote_labels == set() and NEW.quote_labels == {"``", "''", "POS", "NN", "CD", "VBZ", ":"}
    for params in (COLLINS, NEW):
        assert (params.max_error, params.cutoff_length, params.labeled) == (10, 40, True)
        assert params.delete_labels_for_length == {"-NONE-"} and params.same_label("PRT", "ADVP")
    own = tmp_path / "own.prm"
    own.write_text("# unlabelled, and Cat is cat\nLABELED 0\n\nEQ_WORD Cat cat\nDEBUG 1\n")
    params = read_params(str(own))
    assert params == EvalbParams(labeled=False, equal_words=frozenset({frozenset({"Cat", "cat"})}))
    # Unlabelled: the ADJP bracket of WRONG_LABEL matches the gold NP.
    assert _counts(GOLD, WRONG_LABEL, params) == (5, 5, 5)


def test_malformed_parameter_files_name_file_and_line():
    with pytest.raises(UsageError, match=r"^x\.prm:2: unknown key CUTOFF"):
        parse_params("DEBUG 0\nCUTOFF 40\n", "x.prm")
    with pytest.raises(UsageError, match=r"^x\.prm:1: EQ_LABEL takes 2 values, not 1"):
        parse_params("EQ_LABEL ADVP\n", "x.prm")
    with pytest.raises(UsageError, match=r"^x\.prm:3: LABELED takes 0 or 1, not yes"):
        parse_params("# labels\n\nLABELED yes\n", "x.prm")
    with pytest.raises(UsageError, match=r"^--params=nope\.prm: no such file"):
        read_params("nope.prm", "--params")


def test_cli_params(tmp_path):
    gold, test, params = tmp_path / "gold", tmp_path / "test", tmp_path / "bad.prm"
    gold.write_text(_one_line([GOLD_POSSESSIVE, GOLD]))
    test.write_text(_one_line([TEST_QUOTE, MISSING_PP]))
    # new.prm: 2 + 4 matched of 4 + 5 gold and 4 + 4 test brackets.
    result = _evalb(f"--gold={gold}", f"--test={test}", "--params=new.prm")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "EVALB all: F1 70.59  recall 66.67  precision 75.00  exact 0.00  (2 sentences, 0 errors)"
    )
    params.write_text("DELETE_LABEL TOP\nDELETE_LABEL\n")
    assert_one_line_error(
        _evalb(f"--gold={gold}", f"--test={test}", f"--params={params}"),
        f"error: --params={params}:2: DELETE_LABEL takes 1 value, not 0.",
    )
    assert "--params" in _evalb("--help").stdout

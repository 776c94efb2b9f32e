"""Linearisation, restoration and repair of constituency trees."""

import random

from nltk import Tree

from t2t_keras.parsing.evalb import evaluate
from t2t_keras.parsing.trees import PLACEHOLDER, linearize, preprocess, restore, strip_function_tags, to_line, words_to_placeholders
from t2t_keras.problems.parsing_english import ParsingEnglishPtbSample

RAW = """( (S (NP-SBJ-1 (NNP Mr.) (NNP Vinken) ) (VP (VBZ is) (VP (VBN expected) (S (NP-SBJ (-NONE- *-1) )
  (VP (TO to) (VP (VB retire) ))))) (. .) ))"""


def test_preprocess_drops_empty_elements_function_tags_and_root():
    tree = preprocess(Tree.fromstring(RAW))
    assert to_line(tree) == (
        "(S (NP (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (VP (VBN expected) (S (VP (TO to) (VP (VB retire)))))) (. .))"
    )
    assert strip_function_tags("NP-SBJ-1") == "NP" and strip_function_tags("NP=2") == "NP"
    assert strip_function_tags("-LRB-") == "-LRB-" and strip_function_tags("-NONE-") == "-NONE-"
    assert preprocess(Tree.fromstring("( (S (NP-SBJ (-NONE- *)) ))")) is None


def test_linearize_then_restore_is_exact_on_a_tree():
    tree = preprocess(Tree.fromstring(RAW))
    sequence = linearize(tree)
    assert sequence == "(S (NP XX XX ) (VP XX (VP XX (S (VP XX (VP XX ) ) ) ) ) XX )"
    restored, repairs = restore(sequence, tree.leaves())
    assert repairs.total == 0
    expected = tree.copy(deep=True)  # the same tree with every tag a placeholder
    for preterminal in expected.subtrees(lambda t: t.height() == 2):
        preterminal.set_label(PLACEHOLDER)
    assert restored == expected


def test_every_shipped_tree_round_trips_with_f1_100():
    problem = ParsingEnglishPtbSample()
    golds, tests = [], []
    for split in problem.splits:
        for _, tree in problem.trees(split, None):
            restored, repairs = restore(linearize(tree), tree.leaves())
            assert repairs.total == 0
            # The words variant's targets carry the same tree once the words become XX, with
            # labelled closings too.
            assert words_to_placeholders(linearize(tree, words=True)) == linearize(tree)
            labelled, repairs = restore(words_to_placeholders(linearize(tree, words=True, closing_labels=True)), tree.leaves())
            assert labelled == restored and repairs.total == 0
            golds.append(tree)
            tests.append(restored)
    assert len(golds) == 3396 + 273  # the sample's train and dev trees
    result = evaluate(zip(golds, tests))
    assert (result.f1, result.exact_match, result.errors, result.sentences) == (100.0, 100.0, 0, 3396 + 273)


def test_closing_labels_name_the_constituent_they_close():
    tree = preprocess(Tree.fromstring(RAW))
    assert linearize(tree, words=True, closing_labels=True) == (
        "(S (NP Mr. Vinken )NP (VP is (VP expected (S (VP to (VP retire )VP )VP )S )VP )VP . )S"
    )
    # A wrong label still closes the innermost constituent, and is counted.
    restored, repairs = restore("(S (NP XX XX )VP XX )S", ["a", "b", "c"])
    assert to_line(restored) == "(S (NP (XX a) (XX b)) (XX c))" and repairs.mislabelled_closings == 1
    # Words that start with ")" are words, not closings.
    assert words_to_placeholders("(S ): )NP )PRT|ADVP )") == "(S XX )NP )PRT|ADVP )"


def test_repairs_are_counted():
    words = ["a", "b", "c"]
    tree, repairs = restore("(S (NP XX XX ) ) ) XX XX (VP", words)
    # ")" unmatched, one extra XX, "(VP" never closed and empty.
    assert to_line(tree) == "(S (S (NP (XX a) (XX b))) (XX c))"
    assert (repairs.unmatched_closings, repairs.extra_placeholders, repairs.unclosed_openings, repairs.empty_constituents) == (1, 1, 1, 1)
    assert repairs.root_added == 1  # S and XX c side by side on top
    tree, repairs = restore("(S (NP XX ) (VP", words)
    assert tree.leaves() == words and repairs.missing_words == 2 and repairs.unclosed_openings == 2


def test_garbage_gives_a_valid_tree_over_the_words_and_a_finite_f1():
    words = "The cat sat on the mat .".split()
    gold = Tree.fromstring("(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))")
    rng = random.Random(0)
    vocabulary = ["(S", "(NP", "(VP", ")", "XX", "mat", "((", "(", "))", "(S)"]
    garbage = ["", ") ) )", "(S (S (S", "XX XX XX XX XX XX XX XX XX XX", "( ( ) )"]
    garbage += [" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(1, 40))) for _ in range(200)]
    for sequence in garbage:
        tree, _ = restore(sequence, words)
        assert tree.leaves() == words, sequence
        assert Tree.fromstring(to_line(tree)) == tree  # writes and reads back as a valid tree
        result = evaluate([(gold, tree)])
        assert result.errors == 0 and 0.0 <= result.f1 <= 100.0

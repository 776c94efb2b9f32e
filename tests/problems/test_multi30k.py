"""The shipped Multi30k problems."""

import gzip
import os

from t2t_keras import registry
from t2t_keras.data.text_files import TextStats
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR, multi30k_pairs


def _first_line(name):
    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as handle:
        return handle.readline().rstrip("\n")


def test_registered_directions_and_vocabulary():
    for name, (source, target) in {
        "translate_ende_multi30k": ("en", "de"),
        "translate_deen_multi30k": ("de", "en"),
        "translate_enfr_multi30k": ("en", "fr"),
    }.items():
        problem = registry.problem(name)
        assert (problem.source_language, problem.target_language) == (source, target)
        assert problem.vocab_spec.size == 8000
        assert problem.splits == ["train", "dev", "dev2"]
        first = next(iter(problem.text_pairs("dev", None, TextStats())))
        assert first == (_first_line(f"val.{source}.gz"), _first_line(f"val.{target}.gz"))


def test_shipped_data_is_complete():
    problem = registry.problem("translate_ende_multi30k")
    assert [problem.expected_pairs(split, None) for split in problem.splits] == [28000, 1014, 1000]
    assert sum(1 for _ in problem.text_pairs("train", None, TextStats())) == 28000


def test_dev2_is_held_out_of_training():
    """dev2 is every 29th training pair, 1000 in all, none of them in train (by line, and by
    text: a caption repeated elsewhere in train stays in train), the same in every direction
    and in the two-direction problem."""
    train = list(multi30k_pairs("train", "en", "de", TextStats()))
    dev2 = list(multi30k_pairs("dev2", "en", "de", TextStats()))
    with gzip.open(os.path.join(MULTI30K_DIR, "train.en.gz"), "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert [english for english, _ in dev2] == lines[28::29] and len(dev2) == 1000
    assert len(train) + len(dev2) == len(lines) == 29000
    in_train = set(train)
    assert sum(pair in in_train for pair in dev2) <= 5  # the same caption twice in Multi30k: rare
    assert [(de, en) for en, de in dev2] == list(multi30k_pairs("dev2", "de", "en", TextStats()))
    both = list(registry.problem("translate_ende_deen_multi30k").text_pairs("dev2", None, TextStats()))
    assert both[:1000] == [(f">>de<< {en}", de) for en, de in dev2] and both[1000:] == [(f">>en<< {de}", en) for en, de in dev2]


def test_vocabulary_sample_is_bounded_and_deterministic():
    problem = registry.problem("translate_ende_multi30k")

    class Bounded(type(problem)):
        vocab_spec = type(problem).vocab_spec.__class__(size=8000, sample_pairs=500)

    sample = Bounded().vocab_sentences(None)
    assert len(sample) == 1000  # both sides of 500 pairs
    assert sample == Bounded().vocab_sentences(None)
    assert len(problem.vocab_sentences(None)) == 56000  # the whole of its train split fits the default bound

"""The shipped Multi30k problems."""

import gzip
import os

from t2t_keras import registry
from t2t_keras.data.text_files import TextStats
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR


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
        assert problem.splits == ["train", "dev"]
        first = next(iter(problem.text_pairs("dev", None, TextStats())))
        assert first == (_first_line(f"val.{source}.gz"), _first_line(f"val.{target}.gz"))


def test_shipped_data_is_complete():
    problem = registry.problem("translate_ende_multi30k")
    assert problem.expected_pairs("train", None) == 29000
    assert problem.expected_pairs("dev", None) == 1014
    assert sum(1 for _ in problem.text_pairs("train", None, TextStats())) == 29000


def test_vocabulary_sample_is_bounded_and_deterministic():
    problem = registry.problem("translate_ende_multi30k")

    class Bounded(type(problem)):
        vocab_spec = type(problem).vocab_spec.__class__(size=8000, sample_pairs=500)

    sample = Bounded().vocab_sentences(None)
    assert len(sample) == 1000  # both sides of 500 pairs
    assert sample == Bounded().vocab_sentences(None)
    assert len(problem.vocab_sentences(None)) == 58000  # the whole of Multi30k fits the default bound

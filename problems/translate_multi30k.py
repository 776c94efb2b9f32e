"""Multi30k (Elliott et al., 2016): 29000 training and 1014 validation image captions in
English, German and French, shipped inside the package as the embedded default data.

Splits: train = 28000 of the training pairs; dev = val (the 1014 pairs every recipe choice
was tuned on); dev2 = the other 1000 training pairs, every 29th (`in_dev2`: lines 29k + 28,
counting from 0), held out of training so that a choice made on val can be judged on pairs
it was not made on (each caption is of its own image: no image is in both train and dev2).
"""

import os

from t2t_keras.data.text_files import TextStats, read_lines, read_parallel
from t2t_keras.problem import VocabSpec
from t2t_keras.problems.translate import MultilingualProblem, TranslateProblem, language_tokens
from t2t_keras.registry import register_problem

MULTI30K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "multi30k")
DEV2_STRIDE = 29  # every 29th training pair is in dev2: 1000 of the 29000
SPLITS = {"train": 4, "dev": 1, "dev2": 1}  # split -> shards


def in_dev2(line_number: int) -> bool:
    """Whether the training pair on line `line_number` (from 0) of train.*.gz is in dev2."""
    return line_number % DEV2_STRIDE == DEV2_STRIDE - 1


def multi30k_pairs(split: str, source: str, target: str, stats: TextStats):
    """(source, target) caption pairs of `split` ("train", "dev" or "dev2") in file order."""
    name = "val" if split == "dev" else "train"
    pairs = read_parallel(os.path.join(MULTI30K_DIR, f"{name}.{source}.gz"), os.path.join(MULTI30K_DIR, f"{name}.{target}.gz"),
                          stats)
    if split == "dev":
        return pairs
    held_out = split == "dev2"
    return (pair for number, pair in enumerate(pairs) if in_dev2(number) == held_out)


def multi30k_pair_count(split: str) -> int:
    lines = sum(1 for _ in read_lines(os.path.join(MULTI30K_DIR, f"{'val' if split == 'dev' else 'train'}.en.gz"), TextStats()))
    if split == "dev":
        return lines
    held_out = sum(map(in_dev2, range(lines)))
    return held_out if split == "dev2" else lines - held_out


class Multi30kProblem(TranslateProblem):
    """Multi30k in one direction: train, dev (= val) and dev2 (held-out training pairs)."""

    vocab_spec = VocabSpec(size=8000)
    num_shards = SPLITS

    def text_pairs(self, split, tmp_dir, stats):
        return multi30k_pairs(split, self.source_language, self.target_language, stats)

    def expected_pairs(self, split, tmp_dir):
        return multi30k_pair_count(split)


@register_problem()
class TranslateEndeMulti30k(Multi30kProblem):
    """Multi30k English -> German (the demo and test problem)."""

    name = "translate_ende_multi30k"
    source_language, target_language = "en", "de"


@register_problem()
class TranslateDeenMulti30k(Multi30kProblem):
    """Multi30k German -> English."""

    name = "translate_deen_multi30k"
    source_language, target_language = "de", "en"


@register_problem()
class TranslateEnfrMulti30k(Multi30kProblem):
    """Multi30k English -> French."""

    name = "translate_enfr_multi30k"
    source_language, target_language = "en", "fr"


@register_problem()
class TranslateEndeDeenMulti30k(MultilingualProblem):
    """Multi30k English -> German and German -> English, one model: each source starts with
    >>de<< or >>en<<; decode with target_language=de or en. Dev and dev2 in both directions."""

    name = "translate_ende_deen_multi30k"
    directions = (("en", "de"), ("de", "en"))
    vocab_spec = VocabSpec(size=8000, user_defined_symbols=language_tokens(("de", "en")))
    num_shards = SPLITS

    def direction_pairs(self, split, tmp_dir, stats, source, target):
        return multi30k_pairs(split, source, target, stats)

    def expected_pairs(self, split, tmp_dir):
        return len(self.directions) * multi30k_pair_count(split)

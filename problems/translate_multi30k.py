"""Multi30k (Elliott et al., 2016): 29000 training and 1014 validation image captions in
English, German and French, shipped inside the package as the embedded default data."""

import os

from t2t_keras.data.text_files import TextStats, read_lines, read_parallel
from t2t_keras.problem import VocabSpec
from t2t_keras.registry import register_problem
from t2t_keras.problems.translate import MultilingualProblem, ParallelTextProblem, language_tokens

MULTI30K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "multi30k")


SPLIT_FILES = {"train": "train", "dev": "val"}


class Multi30kProblem(ParallelTextProblem):
    """Multi30k in one direction; train = train, dev = val (no test split is shipped)."""

    vocab_spec = VocabSpec(size=8000)
    num_shards = {"train": 4, "dev": 1}

    @property
    def files(self):
        src, tgt = self.source_language, self.target_language
        return {split: (f"{name}.{src}.gz", f"{name}.{tgt}.gz") for split, name in SPLIT_FILES.items()}

    def text_dir(self, tmp_dir):
        return MULTI30K_DIR


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
    >>de<< or >>en<<; decode with target_language=de or en. Dev = val in both directions."""

    name = "translate_ende_deen_multi30k"
    directions = (("en", "de"), ("de", "en"))
    vocab_spec = VocabSpec(size=8000, user_defined_symbols=language_tokens(("de", "en")))
    num_shards = {"train": 4, "dev": 1}

    def direction_pairs(self, split, tmp_dir, stats, source, target):
        name = SPLIT_FILES[split]
        return read_parallel(os.path.join(MULTI30K_DIR, f"{name}.{source}.gz"),
                             os.path.join(MULTI30K_DIR, f"{name}.{target}.gz"), stats)

    def expected_pairs(self, split, tmp_dir):
        name = SPLIT_FILES[split]
        return sum(sum(1 for _ in read_lines(os.path.join(MULTI30K_DIR, f"{name}.{source}.gz"), TextStats()))
                   for source, _ in self.directions)

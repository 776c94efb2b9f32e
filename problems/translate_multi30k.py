"""Multi30k (Elliott et al., 2016): 29000 training and 1014 validation image captions in
English, German and French, shipped inside the package as the embedded default data."""

import os

from t2t_keras.problem import VocabSpec
from t2t_keras.registry import register_problem
from t2t_keras.problems.translate import ParallelTextProblem

MULTI30K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "multi30k")


class Multi30kProblem(ParallelTextProblem):
    """Multi30k in one direction; train = train, dev = val (no test split is shipped)."""

    vocab_spec = VocabSpec(size=8000)
    num_shards = {"train": 4, "dev": 1}

    @property
    def files(self):
        src, tgt = self.source_language, self.target_language
        return {"train": (f"train.{src}.gz", f"train.{tgt}.gz"), "dev": (f"val.{src}.gz", f"val.{tgt}.gz")}

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

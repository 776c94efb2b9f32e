"""A user's own parallel corpus as a t2t-keras problem, loaded with --t2t_usr_dir.

    t2t-keras-datagen --t2t_usr_dir=examples/usr_dir --problem=translate_ende_my_corpus \
        --tmp_dir=DIR_WITH_TEXT --data_dir=DATA_DIR

DIR_WITH_TEXT holds line-aligned files train.en / train.de and dev.en / dev.de (plain or
.gz, named in `files`). tests/problems/test_user_problem.py runs exactly this file.
"""

from t2t_keras.problem import VocabSpec
from t2t_keras.problems.translate import ParallelTextProblem
from t2t_keras.registry import register_problem


@register_problem()
class TranslateEndeMyCorpus(ParallelTextProblem):
    """English -> German over my own line-aligned files in --tmp_dir."""

    name = "translate_ende_my_corpus"
    source_language, target_language = "en", "de"
    vocab_spec = VocabSpec(size=1000)
    num_shards = {"train": 2, "dev": 1}
    files = {"train": ("train.en", "train.de"), "dev": ("dev.en", "dev.de")}

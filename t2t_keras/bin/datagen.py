"""t2t-keras-datagen: train a problem's vocabulary (or one per side) and write its TFRecord shards.

    t2t-keras-datagen --problem=translate_ende_multi30k --data_dir=~/t2t_data
    t2t-keras-datagen --problem=translate_ende_wmt14 --data_dir=~/t2t_data --tmp_dir=~/t2t_tmp
    t2t-keras-datagen --problem=translate_text --data_dir=~/my_data \
        --train_source=corpus/*.en.gz --train_target=corpus/*.de.gz --dev_source=dev.en --dev_target=dev.de
    t2t-keras-datagen ... --vocab_model=~/t2t_train/parent   # the vocabulary of a trained run, for fine-tuning
    t2t-keras-datagen ... --word_alignments   # each pair's word alignments too, for guided alignment
    t2t-keras-datagen --problem=translate_text ... --train_source=a.en,a.de --train_target=a.de,a.en \
        --train_lang_pairs=en-de,de-en --dev_source=d.en,d.de --dev_target=d.de,d.en --dev_lang_pairs=en-de,de-en
"""

import os

from absl import flags

from t2t_keras import registry
from t2t_keras.bin import flags as common_flags
from t2t_keras.data.tokenizers import given_vocabularies
from t2t_keras.errors import UsageError

# Flags that configure --problem=translate_text (recorded in data_dir); other problems take none.
TEXT_FLAGS = ("train_source", "train_target", "dev_source", "dev_target", "vocab_size", "separate_vocabularies",
              "source_language", "target_language", "train_lang_pairs", "dev_lang_pairs")


def define_flags() -> None:
    common_flags.define_registry_flags()
    flags.DEFINE_string("problem", None, "Registered problem, e.g. translate_ende_wmt14, or translate_text for your own files.")
    flags.DEFINE_string("data_dir", None, "Where the vocabulary and TFRecord shards are written.")
    flags.DEFINE_string("tmp_dir", None, "Where raw data is read or downloaded (tfds data_dir for WMT14).")
    flags.DEFINE_bool("overwrite", False, "Regenerate even if data_dir already holds complete data.")
    flags.DEFINE_bool("progress", True, "Show a progress bar.")
    flags.DEFINE_string(
        "vocab_model", None,
        "Use this SentencePiece model instead of training one: a .model file (shared), source.model,target.model, "
        "or a t2t-keras run dir (its vocabulary: what --warm_start_from needs). Its ids must be pad 0, eos 1, unk 2.",
    )
    flags.DEFINE_bool(
        "word_alignments", False,
        "Also store each pair's word alignments (eflomal over all splits, both directions' intersection, as links "
        "between pieces) for guided alignment (--hparams=guided_alignment_weight=...); needs the alignment extra.")
    flags.DEFINE_integer(
        "shuffle_buffer", 1_000_000,
        "Pairs held in memory while writing each split in a random order (larger splits go through temporary files).",
    )
    for split in ("train", "dev"):
        for side in ("source", "target"):
            flags.DEFINE_string(
                f"{split}_{side}", None,
                f"translate_text: the {split} split's {side} files, comma-separated paths or globs (plain or .gz), "
                f"paired in order with --{split}_{'target' if side == 'source' else 'source'}.",
            )
    flags.DEFINE_integer("vocab_size", None, "translate_text: SentencePiece pieces, at most (default 8000).")
    flags.DEFINE_bool("separate_vocabularies", False, "translate_text: one vocabulary per side instead of a shared one.")
    flags.DEFINE_string("source_language", None, "translate_text: the source language's code, e.g. en (recorded).")
    flags.DEFINE_string(
        "target_language", None, "translate_text: the target language's code, e.g. de (recorded; zh picks sacreBLEU's zh tokenizer)."
    )
    for split in ("train", "dev"):
        flags.DEFINE_string(
            f"{split}_lang_pairs", None,
            f"translate_text, one model of several directions: each --{split}_source/--{split}_target file pair's "
            "languages, in order, e.g. en-de,de-en; with several target languages each source gets its target's "
            "token (>>de<<) and decoding asks for one (--target_language).")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if not FLAGS.problem:
        raise UsageError("--problem is required, e.g. --problem=translate_ende_multi30k (see --registry_help).")
    if not FLAGS.data_dir:
        raise UsageError("--data_dir is required: the directory to write the vocabulary and shards to.")
    if FLAGS.shuffle_buffer < 1:
        raise UsageError(f"--shuffle_buffer={FLAGS.shuffle_buffer}: hold at least 1 pair.")
    problem = registry.problem(FLAGS.problem)
    vocabularies = given_vocabularies(FLAGS.vocab_model) if FLAGS.vocab_model else None
    values = {name: FLAGS[name].value for name in TEXT_FLAGS if FLAGS[name].present}
    if vocabularies and "separate_vocabularies" in problem.datagen_flags and "separate_vocabularies" not in values:
        values["separate_vocabularies"] = not vocabularies.shared  # a model per side given
    values.update(_parent_languages(FLAGS.vocab_model, problem, values))
    problem.configure(problem.settings_from_flags(values))
    from t2t_keras.data import datagen  # TensorFlow: imported once the flags are known to be good

    tmp_dir = os.path.expanduser(FLAGS.tmp_dir) if FLAGS.tmp_dir else None
    record = datagen.generate(problem, os.path.expanduser(FLAGS.data_dir), tmp_dir, FLAGS.overwrite, FLAGS.progress,
                              vocabularies, FLAGS.shuffle_buffer, FLAGS.word_alignments)
    print(datagen.format_summary(record))
    return 0


def _parent_languages(vocab_model: str | None, problem, values: dict) -> dict:
    """The languages of the run dir --vocab_model names, for those flags not given: fine-tuning
    data is in the parent's languages (its BLEU tokenizer follows the target's)."""
    from t2t_keras import files
    from t2t_keras.checkpoints import RunDir

    if not vocab_model or not files.isdir(files.absolute(vocab_model)):
        return {}
    run_dir = RunDir(vocab_model)
    if not run_dir.exists():
        return {}
    parent = run_dir.problem()
    return {f"{side}_language": getattr(parent, f"{side}_language", "") for side in ("source", "target")
            if f"{side}_language" in problem.datagen_flags and not values.get(f"{side}_language")}


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

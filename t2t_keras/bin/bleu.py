"""t2t-keras-bleu: BLEU of a translation file against a reference file.

    t2t-keras-bleu --translation=hyp.de --reference=newstest2014.de                 # sacreBLEU, detokenised
    t2t-keras-bleu --translation=hyp.de --reference=newstest2014.de --lowercase     # the same, case-insensitive
    t2t-keras-bleu --translation=hyp.de --reference=newstest2014.de --paper_tokenized  # the paper's en-de style
"""

from absl import flags

from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    flags.DEFINE_string("translation", None, "Hypotheses, one per line.")
    flags.DEFINE_string("reference", None, "References, one per line, aligned with --translation.")
    flags.DEFINE_bool("paper_tokenized", False, "Moses-tokenise and split compounds first, as tensor2tensor's get_ende_bleu.sh.")
    flags.DEFINE_string("language", "de", "Target language, for the Moses tokenizer of --paper_tokenized.")
    flags.DEFINE_bool("lowercase", False, "Case-insensitive sacreBLEU (as most published Multi30k results).")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    if not FLAGS.translation or not FLAGS.reference:
        raise UsageError("--translation and --reference are required.")
    from t2t_keras.decoding.file_decoding import DecodeReport, read_source_lines
    from t2t_keras.evaluation import bleu

    hypotheses = read_source_lines(FLAGS.translation, DecodeReport(), "--translation")
    references = read_source_lines(FLAGS.reference, DecodeReport(), "--reference")
    if len(hypotheses) != len(references):
        raise UsageError(f"--translation has {len(hypotheses)} lines, --reference has {len(references)}; they must be aligned.")
    if FLAGS.paper_tokenized:
        score, signature = bleu.paper_bleu(hypotheses, references, FLAGS.language)
        print(f"Moses-tokenised, compounds split: {score}  ({signature})")
    else:
        print(bleu.sacre_bleu_score(hypotheses, references, FLAGS.lowercase).report)
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

"""t2t-keras-evalb: labelled bracket F1 of parses with the rules of EVALB's COLLINS.prm.

    t2t-keras-evalb --gold=parsing_english_wsj-test.trees --test=section23.parsed

Both files hold bracketed trees (one per line, as the decoder writes them, or .mrg style),
in the same order. Tagging-free: test trees may carry placeholder tags (XX).
"""

from absl import flags

from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    flags.DEFINE_string("gold", None, "Gold trees.")
    flags.DEFINE_string("test", None, "Parsed trees, aligned with --gold.")


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    if not FLAGS.gold or not FLAGS.test:
        raise UsageError("--gold and --test are required.")
    from t2t_keras.evaluation.evalb import evalb_score, read_trees

    gold, test = read_trees(FLAGS.gold, "--gold"), read_trees(FLAGS.test, "--test")
    if len(gold) != len(test):
        raise UsageError(f"--gold has {len(gold)} trees, --test has {len(test)}; they must be aligned.")
    print(evalb_score(gold, test).report)
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

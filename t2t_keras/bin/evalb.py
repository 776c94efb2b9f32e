"""t2t-keras-evalb: labelled bracket F1 of parses, as EVALB computes it with a parameter file.

    t2t-keras-evalb --gold=parsing_english_wsj-test.trees --test=section23.parsed
    t2t-keras-evalb --gold=... --test=charniak.parsed --params=new.prm

Both files hold bracketed trees (one per line, as the decoder writes them, or .mrg style),
in the same order. --params is an EVALB parameter file: COLLINS.prm (the default) or new.prm
(EVALB's 2006 fix: a quote word the test tags differently is put back instead of making a
length mismatch), both built in, or a path to one of your own ("KEY value" lines, as EVALB
reads them). Tagging-free: test trees may carry placeholder tags (XX), which stand for the
gold tags.
"""

from absl import flags

from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    flags.DEFINE_string("gold", None, "Gold trees.")
    flags.DEFINE_string("test", None, "Parsed trees, aligned with --gold.")
    flags.DEFINE_string(
        "params", "COLLINS.prm", "EVALB parameter file: a path, or EVALB's own COLLINS.prm or new.prm (built in)."
    )


def main(argv) -> int:
    del argv
    FLAGS = flags.FLAGS
    if not FLAGS.gold or not FLAGS.test:
        raise UsageError("--gold and --test are required.")
    from t2t_keras.parsing.evalb import evalb_score
    from t2t_keras.parsing.evalb_params import read_params
    from t2t_keras.parsing.trees import read_trees

    params = read_params(FLAGS.params, "--params")
    gold, test = read_trees(FLAGS.gold, "--gold"), read_trees(FLAGS.test, "--test")
    if len(gold) != len(test):
        raise UsageError(f"--gold has {len(gold)} trees, --test has {len(test)}; they must be aligned.")
    print(evalb_score(gold, test, params).report)
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

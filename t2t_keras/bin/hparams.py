"""t2t-keras-hparams: print a resolved hparams set as JSON (what the trainer will save), or
describe every hparam or decode setting.

    t2t-keras-hparams --hparams_set=transformer_big --hparams="num_hidden_layers=4"
    t2t-keras-hparams --registry_help                          # problems, hparams sets, models
    t2t-keras-hparams --describe                               # every hparam and its meaning
    t2t-keras-hparams --describe --hparams_set=transformer_big # ... with that set's values
    t2t-keras-hparams --describe_decode --problem=parsing_english_wsj   # decode settings and defaults
"""

from absl import flags

from t2t_keras import hparams_lib, registry
from t2t_keras.bin import flags as common_flags


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_hparams_flags()
    flags.DEFINE_bool(
        "describe", False, "Print every hparam with its type, group and meaning (and value, with --hparams_set), then exit."
    )
    flags.DEFINE_bool(
        "describe_decode", False,
        "Print every decode setting (--decode_hparams of the decoder, trainer and exporter) with its meaning and "
        "default (--problem's defaults if given), then exit.",
    )
    flags.DEFINE_string("problem", None, "With --describe_decode: show this problem's decode defaults.")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if FLAGS.describe_decode:
        defaults = registry.problem(FLAGS.problem).decode_defaults if FLAGS.problem else hparams_lib.DecodeHParams()
        print(f"decode settings (--decode_hparams=\"name=value,...\"), defaults of {FLAGS.problem or 'translation'}:")
        print(hparams_lib.describe_fields(defaults))
        return 0
    if FLAGS.describe:
        values = common_flags.resolve_hparams() if FLAGS.hparams_set else None
        print(hparams_lib.describe_fields(values))
        return 0
    print(common_flags.resolve_hparams().to_json(), end="")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

"""t2t-keras-hparams: print a resolved hparams set as JSON (what the trainer will save).

    t2t-keras-hparams --hparams_set=transformer_big --hparams="num_hidden_layers=4"
    t2t-keras-hparams --registry_help
    t2t-keras-hparams --describe
"""

from absl import flags

from t2t_keras import hparams_lib
from t2t_keras.bin import flags as common_flags


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_hparams_flags()
    flags.DEFINE_bool("describe", False, "Print every hparam with its type, group and meaning, then exit.")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    if flags.FLAGS.describe:
        print(hparams_lib.describe_fields())
        return 0
    print(common_flags.resolve_hparams().to_json(), end="")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

"""t2t-keras-datagen: train a problem's vocabulary (or one per side) and write its TFRecord shards.

    t2t-keras-datagen --problem=translate_ende_multi30k --data_dir=~/t2t_data
    t2t-keras-datagen --problem=translate_ende_wmt14 --data_dir=~/t2t_data --tmp_dir=~/t2t_tmp
"""

import os

from absl import flags

from t2t_keras import registry
from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    flags.DEFINE_string("problem", None, "Registered problem, e.g. translate_ende_wmt14.")
    flags.DEFINE_string("data_dir", None, "Where the vocabulary and TFRecord shards are written.")
    flags.DEFINE_string("tmp_dir", None, "Where raw data is read or downloaded (tfds data_dir for WMT14).")
    flags.DEFINE_bool("overwrite", False, "Regenerate even if data_dir already holds complete data.")
    flags.DEFINE_bool("progress", True, "Show a progress bar.")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if not FLAGS.problem:
        raise UsageError("--problem is required, e.g. --problem=translate_ende_multi30k (see --registry_help).")
    if not FLAGS.data_dir:
        raise UsageError("--data_dir is required: the directory to write the vocabulary and shards to.")
    problem = registry.problem(FLAGS.problem)
    from t2t_keras.data import datagen  # TensorFlow: imported once the flags are known to be good

    tmp_dir = os.path.expanduser(FLAGS.tmp_dir) if FLAGS.tmp_dir else None
    record = datagen.generate(problem, os.path.expanduser(FLAGS.data_dir), tmp_dir, FLAGS.overwrite, FLAGS.progress)
    print(datagen.format_summary(record))
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

"""t2t-keras-avg-checkpoints: average the model weights of the last N checkpoints.

    t2t-keras-avg-checkpoints --output_dir=~/t2t_train/base --num_last_checkpoints=5 --avg_dir=~/t2t_train/base_avg5

--avg_dir is then an output_dir for t2t-keras-decoder and t2t-keras-exporter.
"""

from absl import flags

from t2t_keras import files
from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()  # a user model named in hparams.json may need --t2t_usr_dir
    flags.DEFINE_string("output_dir", None, "The trainer's output_dir.")
    flags.DEFINE_integer("num_last_checkpoints", 5, "How many of the newest checkpoints to average (paper: 5 base, 20 big).")
    flags.DEFINE_string("avg_dir", None, "Where to write the averaged checkpoint (a new output_dir).")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if not FLAGS.output_dir or not FLAGS.avg_dir:
        raise UsageError("--output_dir and --avg_dir are required.")
    files.check_output_path(FLAGS.avg_dir, "--avg_dir", directory=True)
    from t2t_keras.checkpoints import average_checkpoints  # TensorFlow loads here

    path = average_checkpoints(FLAGS.output_dir, FLAGS.num_last_checkpoints, FLAGS.avg_dir)
    what = "the last checkpoint" if FLAGS.num_last_checkpoints == 1 else f"the average of the last {FLAGS.num_last_checkpoints} checkpoints"
    print(f"wrote {what} of {FLAGS.output_dir} to {path}")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

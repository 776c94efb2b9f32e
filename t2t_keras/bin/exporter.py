"""t2t-keras-exporter: a SavedModel that stock TensorFlow Serving loads, text in, text out.

    t2t-keras-exporter --output_dir=~/t2t_train/base_avg5 --export_dir=~/serving/ende
    tensorflow_model_server --rest_api_port=8501 --model_name=ende --model_base_path=$HOME/serving/ende
"""

from absl import flags

from t2t_keras import hparams_lib, registry
from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    flags.DEFINE_string("output_dir", None, "The trainer's output_dir (or an averaged --avg_dir).")
    flags.DEFINE_string("checkpoint_path", None, "A checkpoint to export instead of the latest, e.g. DIR/ckpt-50000.")
    flags.DEFINE_string("export_dir", None, "TF Serving's model base path; the export becomes export_dir/<version>/.")
    flags.DEFINE_integer("version", None, "The export's version number (default: the checkpoint's step).")
    flags.DEFINE_string("decode_hparams", "", 'Overrides of the problem\'s decode defaults, e.g. "beam_size=4,alpha=0.6,extra_length=50".')


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    for name in ("output_dir", "export_dir"):
        if not getattr(FLAGS, name):
            raise UsageError(f"--{name} is required (see --helpfull).")
    from t2t_keras.run_dir import RunDir

    run_dir = RunDir(FLAGS.output_dir)
    run_dir.hparams()  # one-line errors for a directory the trainer did not write
    problem = registry.problem(run_dir.run_info()["problem"])
    decode_hparams = hparams_lib.apply_overrides(problem.decode_defaults, FLAGS.decode_hparams, "--decode_hparams").validated()
    run_dir.require_checkpoint(FLAGS.checkpoint_path)

    from t2t_keras.serving.exporter import export_run  # TensorFlow loads here, once the flags are known to be good

    path = export_run(FLAGS.output_dir, FLAGS.export_dir, decode_hparams, FLAGS.checkpoint_path, FLAGS.version)
    print(f"exported {path}")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

"""t2t-keras-exporter: a SavedModel that stock TensorFlow Serving loads, text in, text out.

    t2t-keras-exporter --output_dir=~/t2t_train/base_avg5 --export_dir=~/serving/ende
    tensorflow_model_server --rest_api_port=8501 --model_name=ende --model_base_path=$HOME/serving/ende
"""

from absl import flags

from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_trained_run_flags("export")
    flags.DEFINE_string("export_dir", None, "TF Serving's model base path; the export becomes export_dir/<version>/.")
    flags.DEFINE_integer("version", None, "The export's version number (default: the checkpoint's step).")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if FLAGS.output_dir and not FLAGS.export_dir:
        raise UsageError("--export_dir is required: TF Serving's model base path (see --helpfull).")
    _, _, decode_hparams = common_flags.load_trained_run()

    from t2t_keras.serving.exporter import export_run  # TensorFlow loads here, once the flags are known to be good

    path = export_run(FLAGS.output_dir, FLAGS.export_dir, decode_hparams, FLAGS.checkpoint_path, FLAGS.version)
    print(f"exported {path}")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

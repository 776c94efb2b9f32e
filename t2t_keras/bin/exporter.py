"""t2t-keras-exporter: a SavedModel that stock TensorFlow Serving loads, text in, text out; or
a CTranslate2 model directory for CPU deployments.

    t2t-keras-exporter --output_dir=~/t2t_train/base_avg5 --export_dir=~/serving/ende
    tensorflow_model_server --rest_api_port=8501 --model_name=ende --model_base_path=$HOME/serving/ende
    t2t-keras-exporter --format=ctranslate2 --quantization=int8 --output_dir=~/t2t_train/base_avg5 --export_dir=~/ct2/ende
"""

from absl import flags

from t2t_keras import files
from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_trained_run_flags("export")
    flags.DEFINE_enum("format", "saved_model", ["saved_model", "ctranslate2"],
                      "saved_model: for TF Serving (text in, text out); ctranslate2: a model directory for CTranslate2 "
                      '(pip install "t2t-keras[ctranslate2]").')
    flags.DEFINE_string("export_dir", None, "saved_model: TF Serving's model base path, the export becomes "
                        "export_dir/<version>/; ctranslate2: the model directory (must not exist).")
    flags.DEFINE_integer("version", None, "saved_model: the export's version number (default: the checkpoint's step).")
    flags.DEFINE_string("quantization", "float32", "ctranslate2: the weights' type, as CTranslate2's converters take it "
                        "(float32, int8, int8_float32, bfloat16, int8_bfloat16, float16, int16).")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if FLAGS.output_dir and not FLAGS.export_dir:
        raise UsageError("--export_dir is required: TF Serving's model base path (see --helpfull).")
    if FLAGS.export_dir:
        files.check_output_path(FLAGS.export_dir, "--export_dir", directory=True)
    run = common_flags.load_trained_run(for_export=True)
    if FLAGS.format == "ctranslate2":
        if FLAGS.version is not None:
            raise UsageError("--version is for --format=saved_model; a CTranslate2 model is the --export_dir itself.")
        from t2t_keras.serving import ctranslate2_export

        path = ctranslate2_export.export_run(run, FLAGS.export_dir, FLAGS.quantization)
        print(f"exported {path}")
        return 0
    if FLAGS["quantization"].present:
        raise UsageError("--quantization is for --format=ctranslate2 (a SavedModel's precision is --decode_hparams=precision=...).")

    from t2t_keras.serving.exporter import export_run  # TensorFlow loads here, once the flags are known to be good

    path = export_run(run, FLAGS.export_dir, FLAGS.version)
    print(f"exported {path}")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

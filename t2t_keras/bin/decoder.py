"""t2t-keras-decoder: translate a file, or lines typed at a prompt, with a trained model.

    t2t-keras-decoder --output_dir=~/t2t_train/base_avg5 --decode_from_file=newstest2014.en \
        --decode_to_file=newstest2014.de.hyp --decode_reference=newstest2014.de
    t2t-keras-decoder --output_dir=~/t2t_train/base --decode_interactive
"""

import sys

from absl import flags

from t2t_keras.bin import flags as common_flags
from t2t_keras.decoding import file_decoding
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_trained_run_flags("decode with")
    flags.DEFINE_string("decode_from_file", None, "Source sentences, one per line.")
    flags.DEFINE_string("decode_to_file", None, "Where to write the translations (default: stdout).")
    flags.DEFINE_string("decode_reference", None, "References of --decode_from_file (translations; gold trees for parsing): print BLEU (EVALB F1 for parsing) at the end.")
    flags.DEFINE_bool("decode_interactive", False, "Translate lines typed at a prompt.")
    flags.DEFINE_bool("progress", True, "Show a progress bar while decoding a file.")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if FLAGS.output_dir and not FLAGS.decode_from_file and not FLAGS.decode_interactive:
        raise UsageError("say what to decode: --decode_from_file=FILE or --decode_interactive.")
    run_dir, problem, decode_hparams = common_flags.load_trained_run()
    reference = None
    if FLAGS.decode_reference:
        reference = problem.read_reference(FLAGS.decode_reference, "--decode_reference")

    from t2t_keras.decoding.translator import Translator  # TensorFlow loads here, once the flags are known to be good

    translator = Translator.from_run_dir(run_dir.path, decode_hparams, FLAGS.checkpoint_path)
    if FLAGS.decode_interactive:
        file_decoding.interactive(translator)
        return 0

    report = file_decoding.DecodeReport()
    sources = file_decoding.read_source_lines(FLAGS.decode_from_file, report)
    if reference is not None and len(reference) != len(sources):
        raise UsageError(
            f"--decode_reference={FLAGS.decode_reference} has {len(reference)} references, "
            f"--decode_from_file has {len(sources)}; they must be aligned."
        )
    outputs = file_decoding.translate_lines(translator, sources, report, progress=FLAGS.progress)
    outputs, repairs = file_decoding.postprocess_lines(problem, sources, outputs)
    if FLAGS.decode_to_file:
        file_decoding.write_lines(FLAGS.decode_to_file, outputs)
    else:
        sys.stdout.writelines(line + "\n" for line in outputs)
    summary = f"decoded {report.lines} lines with {translator.checkpoint_path} ({report.empty_lines} empty)"
    if report.invalid_utf8_lines:
        shown = ", ".join(str(n) for n in report.invalid_utf8_lines[:20])
        summary += f"; invalid UTF-8 replaced on {len(report.invalid_utf8_lines)} lines: {shown}"
    if repairs:
        summary += f"; {repairs} repairs to make the outputs well-formed"
    print(summary, file=sys.stderr)
    if reference is not None:
        print(problem.score_outputs([o.split("\t")[0] for o in outputs], reference).report, file=sys.stderr)
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()

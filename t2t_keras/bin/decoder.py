"""t2t-keras-decoder: translate a file, or lines typed at a prompt, with a trained model;
or score given translations.

    t2t-keras-decoder --output_dir=~/t2t_train/base_avg5 --decode_from_file=newstest2014.en \
        --decode_to_file=newstest2014.de.hyp --decode_reference=newstest2014.de
    t2t-keras-decoder --output_dir=~/t2t_train/base --decode_interactive
    t2t-keras-decoder --output_dir=... --decode_from_file=in.en --n_best=4 --with_scores   # 4 lines per input
    t2t-keras-decoder --output_dir=... --decode_from_file=in.en --score_file=in.de          # log P(de | en) per line

Output: one line per input line; with --n_best=N, N consecutive lines per input line, best
first; with --with_scores each line is "<log P(output | input)>\t<output>".
"""

import dataclasses
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
    flags.DEFINE_integer("n_best", 1, "Hypotheses written per input line, best first (at most beam_size).")
    flags.DEFINE_bool("with_scores", False, "Write each hypothesis as \"<log P(output | input)>\\t<output>\".")
    flags.DEFINE_string(
        "score_file", None,
        "Instead of translating, write log P(target | source) for each line of this file (targets) and the "
        "same line of --decode_from_file (sources), as the SavedModel's score signature.",
    )
    flags.DEFINE_bool("progress", True, "Show a progress bar while decoding a file.")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if FLAGS.output_dir and not FLAGS.decode_from_file and not FLAGS.decode_interactive:
        raise UsageError("say what to decode: --decode_from_file=FILE or --decode_interactive.")
    run_dir, problem, decode_hparams = common_flags.load_trained_run()
    if not 1 <= FLAGS.n_best <= decode_hparams.beam_size:
        raise UsageError(f"--n_best={FLAGS.n_best}: choose 1 to beam_size ({decode_hparams.beam_size}).")
    report = file_decoding.DecodeReport()
    sources = file_decoding.read_source_lines(FLAGS.decode_from_file, report) if FLAGS.decode_from_file else []
    reference = problem.read_reference(FLAGS.decode_reference, "--decode_reference") if FLAGS.decode_reference else None
    targets = None
    if FLAGS.score_file:
        targets = file_decoding.read_source_lines(FLAGS.score_file, file_decoding.DecodeReport(), "--score_file")
    for flag, lines in ((f"--decode_reference={FLAGS.decode_reference}", reference), (f"--score_file={FLAGS.score_file}", targets)):
        if lines is not None and len(lines) != len(sources):
            raise UsageError(f"{flag} has {len(lines)} lines, --decode_from_file has {len(sources)}; they must be aligned.")

    from t2t_keras.decoding.translator import Translator  # TensorFlow loads here, once the flags are known to be good
    from t2t_keras.system import cores_for_decoding

    if targets is None:  # scoring alone is one forward pass per batch, which wants every core per op
        decode_hparams = dataclasses.replace(decode_hparams, parallel_parts=cores_for_decoding(decode_hparams.parallel_parts))
    translator = Translator.from_run_dir(run_dir.path, decode_hparams, FLAGS.checkpoint_path)
    if FLAGS.decode_interactive:
        file_decoding.interactive(translator)
        return 0
    if targets is not None:
        scores = file_decoding.score_lines(translator, sources, targets)
        _write([f"{score:.4f}" for score in scores])
        print(f"scored {len(scores)} pairs with {translator.checkpoint_path}", file=sys.stderr)
        return 0

    outputs = file_decoding.translate_lines(translator, sources, report, progress=FLAGS.progress, n_best=FLAGS.n_best,
                                             log_probs=FLAGS.with_scores)
    outputs, repairs = file_decoding.postprocess(problem, sources, outputs)
    _write(file_decoding.output_lines(outputs, FLAGS.with_scores))
    summary = f"decoded {report.lines} lines with {translator.checkpoint_path} ({report.empty_lines} empty)"
    if report.invalid_utf8_lines:
        shown = ", ".join(str(n) for n in report.invalid_utf8_lines[:20])
        summary += f"; invalid UTF-8 replaced on {len(report.invalid_utf8_lines)} lines: {shown}"
    if repairs:
        summary += f"; {repairs} repairs to make the outputs well-formed"
    print(summary, file=sys.stderr)
    if reference is not None:
        print(problem.score_outputs([hypotheses[0].text for hypotheses in outputs], reference).report, file=sys.stderr)
    return 0


def _write(lines: list[str]) -> None:
    if flags.FLAGS.decode_to_file:
        file_decoding.write_lines(flags.FLAGS.decode_to_file, lines)
    else:
        sys.stdout.writelines(line + "\n" for line in lines)


def run() -> None:
    common_flags.run(main, define_flags, common_flags.decode_settings_help())


if __name__ == "__main__":
    run()

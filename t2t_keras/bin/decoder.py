"""t2t-keras-decoder: translate a file, or lines typed at a prompt, with a trained model (or an
ensemble of them); or score given translations.

    t2t-keras-decoder --output_dir=~/t2t_train/base_avg5 --decode_from_file=newstest2014.en \
        --decode_to_file=newstest2014.de.hyp --decode_reference=newstest2014.de
    t2t-keras-decoder --output_dir=~/t2t_train/base --decode_interactive
    t2t-keras-decoder --output_dir=... --decode_from_file=in.en --n_best=4 --with_scores   # 4 lines per input
    t2t-keras-decoder --output_dir=... --decode_from_file=in.en --score_file=in.de          # log P(de | en) per line
    t2t-keras-decoder --output_dir=A --ensemble=B,C ...                                     # the three models as one
    t2t-keras-decoder --output_dir=ENDE --reverse_model=DEEN ...   # the beam's hypotheses reranked by log P(en | de)
    t2t-keras-decoder ... --decode_shards=8 --decode_shard_id=3   # lines of block 3 of 8 -> FILE.shard-3-of-8
    t2t-keras-decoder ... --prefix_file=in.prefix.de --avoid_file=in.avoid.json   # steered, line by line
    t2t-keras-decoder ... --constraints_file=in.terms.json   # terms each output must hold
    t2t-keras-decoder ... --decode_to_file=out.de --alignment_file=out.align     # word alignments beside it
    t2t-keras-decoder --output_dir=ENDE_DEEN --decode_from_file=in.en --target_language=de   # a model of several

Output: one line per input line; with --n_best=N, N consecutive lines per input line, best
first; --with_scores puts the search's score before each output, --with_log_probs log P(output | input)
("<score>\\t<log P>\\t<output>" with both): the quantities the SavedModel calls scores and log_probs.

A file is decoded as it is read and written in input order as it goes; Ctrl-C or a kill
keeps the lines written, and the same command continues after them (FILE.decode.json
records the input, checkpoint and settings it must match).
"""

import contextlib
import itertools
import sys

from absl import flags

from t2t_keras import files, locks
from t2t_keras.bin import flags as common_flags
from t2t_keras.data import target_languages
from t2t_keras.data.text_files import check_text_file
from t2t_keras.decoding import file_decoding
from t2t_keras.errors import Terminated, UsageError

STEERING_FILES = ("prefix_file", "avoid_file", "constraints_file")  # read line by line with --decode_from_file


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_trained_run_flags("decode with")
    flags.DEFINE_string("decode_from_file", None, "Source sentences, one per line (plain or .gz).")
    flags.DEFINE_string(
        "decode_to_file", None,
        "Where to write the translations (default: stdout), line by line as they are decoded; rerunning the same "
        "command after an interruption continues where it stopped.",
    )
    flags.DEFINE_string("decode_reference", None, "References of --decode_from_file (translations; gold trees for parsing): print BLEU and chrF (EVALB F1 for parsing) at the end.")
    flags.DEFINE_bool("decode_interactive", False, "Translate lines typed at a prompt.")
    flags.DEFINE_string("target_language", None,
                        "A model of several target languages: translate every line into this one (e.g. de; the decode "
                        "setting target_language). Without it, each line starts with its language's token (>>de<<).")
    flags.DEFINE_integer("n_best", 1, "Hypotheses written per input line, best first (at most beam_size).")
    flags.DEFINE_bool("with_scores", False, "Write each hypothesis as \"<score>\\t<output>\": what the search ranked it by, "
                      "log P / ((5 + length) / 6) ** alpha (the SavedModel's scores), plus the reverse term with --reverse_model.")
    flags.DEFINE_bool("with_log_probs", False, "Write each hypothesis as \"<log P(output | input)>\\t<output>\" (after the "
                      "score with --with_scores; the SavedModel's log_probs).")
    flags.DEFINE_string(
        "score_file", None,
        "Instead of translating, write log P(target | source) for each line of this file (targets) and the "
        "same line of --decode_from_file (sources), as the SavedModel's score signature.",
    )
    flags.DEFINE_string(
        "ensemble", None,
        "More run dirs or checkpoints (comma-separated) decoding together with --output_dir's model: the average of "
        "their next-token probabilities at every step. They must share its vocabularies.",
    )
    flags.DEFINE_string(
        "reverse_model", None,
        "A run dir or checkpoint of a model trained in the other direction (e.g. de -> en for an en -> de model): "
        "each sentence's beam_size hypotheses are reranked by score + reverse_weight x its log P(source | hypothesis) "
        "/ source tokens (--decode_hparams=reverse_weight=...), which penalises outputs that leave parts of the "
        "input untranslated.",
    )
    flags.DEFINE_integer("decode_shards", 1, "Split --decode_from_file into this many contiguous blocks of lines ...")
    flags.DEFINE_integer(
        "decode_shard_id", 0, "... and decode block number this (0-based) into DECODE_TO_FILE.shard-ID-of-SHARDS."
    )
    flags.DEFINE_bool("start_over", False, "Decode from the first line even if DECODE_TO_FILE holds a resumable earlier run; "
                      "replace a DECODE_TO_FILE the decoder did not write (refused without this flag).")
    flags.DEFINE_bool("progress", True, "Show a progress bar while decoding a file.")
    flags.DEFINE_string("prefix_file", None,
                        "Line by line with --decode_from_file, the text each output starts with (empty: none); one "
                        "ending inside a word (\"Ein Hu\") is completed by a piece that continues the word.")
    flags.DEFINE_string("alignment_file", None,
                        "Write each output line's word alignment to this file, line by line with the output: Pharaoh "
                        "\"i-j\" pairs of whitespace words (source i, output j), from the cross-attention of "
                        "--decode_hparams=alignment_layer (default the last).")
    flags.DEFINE_string("avoid_file", None,
                        "Line by line with --decode_from_file, a JSON list of terms (words or phrases) the output must "
                        "not contain, e.g. [\"Hund\", \"rote Katze\"] (an empty line: none).")
    flags.DEFINE_string("constraints_file", None,
                        "Line by line with --decode_from_file, a JSON list of terms (words or phrases) the output must "
                        "contain, as written, e.g. [\"Köter\"] (an empty line: none); a line whose maximum length leaves "
                        "no room for them all is named on stderr.")


def main(argv) -> int:
    del argv
    with contextlib.ExitStack() as held:  # the output file's lock, until the command ends
        return _main(held)


def _main(held: contextlib.ExitStack) -> int:
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    if FLAGS.output_dir and not FLAGS.decode_from_file and not FLAGS.decode_interactive:
        raise UsageError("say what to decode: --decode_from_file=FILE or --decode_interactive.")
    if not 0 <= FLAGS.decode_shard_id < FLAGS.decode_shards:
        raise UsageError(f"--decode_shard_id={FLAGS.decode_shard_id}: choose 0 to --decode_shards - 1 ({FLAGS.decode_shards - 1}).")
    if FLAGS.decode_shards > 1 and not FLAGS.decode_to_file:
        raise UsageError("--decode_shards needs --decode_to_file (each shard is written to DECODE_TO_FILE.shard-I-of-N).")
    _check_files()
    ensemble = [path for path in (FLAGS.ensemble or "").split(",") if path.strip()]
    run = common_flags.load_trained_run(check_checkpoint=False, ensemble=ensemble, reverse=FLAGS.reverse_model)
    if FLAGS.target_language is not None:
        run = run.with_settings(target_language=FLAGS.target_language)
        target_languages.check_language(run.problem.target_languages, FLAGS.target_language)
    problem, decode_hparams = run.problem, run.decode_hparams
    if not 1 <= FLAGS.n_best <= decode_hparams.beam_size:
        raise UsageError(f"--n_best={FLAGS.n_best}: choose 1 to beam_size ({decode_hparams.beam_size}).")

    from t2t_keras.data.text_files import TextStats, count_lines, read_lines

    total = count_lines(FLAGS.decode_from_file, "--decode_from_file") if FLAGS.decode_from_file else 0
    reference = problem.read_reference(FLAGS.decode_reference, "--decode_reference") if FLAGS.decode_reference else None
    if reference is not None and len(reference) != total:
        raise UsageError(f"--decode_reference={FLAGS.decode_reference} has {len(reference)} lines, --decode_from_file has {total}; they must be aligned.")
    for name in STEERING_FILES:
        if FLAGS[name].value and count_lines(FLAGS[name].value, f"--{name}") != total:
            raise UsageError(f"--{name}={FLAGS[name].value} has {count_lines(FLAGS[name].value, f'--{name}')} lines, "
                             f"--decode_from_file has {total}; they must be aligned (an empty line: none).")
    if FLAGS.score_file:
        if FLAGS.reverse_model:
            raise UsageError("--reverse_model reranks the decoder's own hypotheses; --score_file scores given ones: choose one.")
        return _score(run)
    from t2t_keras.decoding.resumable_output import ResumableOutput, output_record

    # TensorFlow loads here, once the flags are known to be good; the checkpoints an output's
    # record names are the ones decoded (the run resolves them once).
    checkpoints = run.checkpoints
    shards, shard = FLAGS.decode_shards, FLAGS.decode_shard_id
    first, end = shard * total // shards, (shard + 1) * total // shards
    path = _output_path()
    output = alignment_output = None
    if FLAGS.decode_to_file and not files.is_local(path) and files.exists(path) and not FLAGS.start_over:
        _refuse_to_replace(path)  # an object store's output is written whole: no record to resume from
    if FLAGS.decode_to_file and files.is_local(path) and not FLAGS.decode_interactive:
        record = output_record(FLAGS.decode_from_file, (first, end), checkpoints, decode_hparams, FLAGS.n_best, _columns(),
                               {name: FLAGS[name].value for name in STEERING_FILES})
        output = ResumableOutput(path, record, FLAGS.n_best)
        if FLAGS.alignment_file:  # grown with the output, resumed with it
            alignment_output = ResumableOutput(_output_path(FLAGS.alignment_file), {**record, "alignments_of": path},
                                               FLAGS.n_best)
        # A rerun of another input, checkpoint or settings is refused, and a finished one ends, before any model is built.
        if all(o.progress(FLAGS.start_over)[1] for o in (output, alignment_output) if o is not None):
            return _nothing_to_do(path, end - first)
        held.enter_context(locks.holding(path + locks.FILE_LOCK_SUFFIX, "--decode_to_file", path))  # one decoder a file

    from t2t_keras.translator import Translator

    translator = Translator.from_run(run)  # the Python API's decoding: a part of each batch per core, an op a thread
    if output is not None:  # which kernels decoded it, as this machine chose them
        output.notes["kernel_choices"] = translator.search_module().kernels.record()
    if FLAGS.decode_interactive:
        file_decoding.interactive(translator)
        return 0

    report = file_decoding.DecodeReport()
    stats = TextStats()

    def numbered(skip: int):
        lines = enumerate(read_lines(FLAGS.decode_from_file, stats, "--decode_from_file"))
        return itertools.islice(lines, first + skip, end)

    def steering(skip: int):
        """Each line's (prefix, avoided terms, required terms) from --prefix_file, --avoid_file
        and --constraints_file, or None."""
        if not any(FLAGS[name].value for name in STEERING_FILES):
            return None
        prefixes = read_lines(FLAGS.prefix_file, TextStats(), "--prefix_file") if FLAGS.prefix_file else itertools.repeat("")
        avoids = file_decoding.read_term_lines(FLAGS.avoid_file) if FLAGS.avoid_file else itertools.repeat(None)
        required = (file_decoding.read_term_lines(FLAGS.constraints_file, "--constraints_file") if FLAGS.constraints_file
                    else itertools.repeat(None))
        return itertools.islice(((prefix or None, terms, needed) for prefix, terms, needed in zip(prefixes, avoids, required)),
                                first + skip, end)

    alignments = [] if FLAGS.alignment_file and output is None else None  # written whole at the end

    if not FLAGS.decode_to_file:
        best = []

        def write(lines):
            sys.stdout.writelines(line + "\n" for line in lines)
            sys.stdout.flush()
            best.extend(_best_texts(lines, FLAGS.n_best))

        _decode(translator, numbered(0), write, report, end - first, 0, steering(0), _collect(alignments))
        _write_alignments(alignments)
        _summary(translator, report, stats, problem, reference, best, resumed=0, block=(first, end))
        return 0

    if output is None:  # an object store: no appending there; the whole output at once, when complete
        with files.atomic_path(path) as temporary, files.open_file(temporary, "w") as handle:
            _decode(translator, numbered(0), lambda lines: handle.write("".join(line + "\n" for line in lines)),
                    report, end - first, 0, steering(0), _collect(alignments))
        _write_alignments(alignments)
        best = _best_texts(_written_lines(path), FLAGS.n_best)
        _summary(translator, report, stats, problem, None if reference is None else reference[first:end], best, resumed=0, block=(first, end))
        return 0
    done, complete = output.open(FLAGS.start_over, _aligned_inputs(alignment_output))
    if alignment_output is not None:
        alignment_output.open(FLAGS.start_over, done)
    if complete:  # finished by another run since the check above
        return _nothing_to_do(path, end - first)
    if done:
        print(f"resuming {path}: {done} of {end - first} input lines are done; decoding the {end - first - done} left.", file=sys.stderr)
    finished = False
    try:
        _decode(translator, numbered(done), output.write, report, end - first, done, steering(done),
                alignment_output.write if alignment_output is not None else None)
        finished = True
    except KeyboardInterrupt as interrupt:
        for written_output in (output, alignment_output):
            if written_output is not None:
                written_output.close(complete=False)
        written = output.complete_inputs()
        raise type(interrupt)(  # Ctrl-C or SIGTERM (errors.Terminated), as it came
            f"{_stopped_by(interrupt)}: {written} of {end - first} input lines are in {path}; rerun the same command "
            "to continue."
        ) from None
    finally:
        for written_output in (alignment_output, output):  # the output last: its record says both are complete
            if written_output is not None:
                written_output.close(complete=finished)
    best = None
    if reference is not None:
        best = _best_texts(_written_lines(path), FLAGS.n_best)
        reference = reference[first:end]
    _summary(translator, report, stats, problem, reference, best, resumed=done, block=(first, end))
    return 0


def _output_path(name: str | None = None) -> str:
    """The file this command writes: --decode_to_file (or `name`), or its shard's name."""
    FLAGS = flags.FLAGS
    name = name or FLAGS.decode_to_file
    shards, shard = FLAGS.decode_shards, FLAGS.decode_shard_id
    return name if shards == 1 else f"{name}.shard-{shard}-of-{shards}"


def _aligned_inputs(alignment_output) -> int | None:
    """The inputs whose alignments are complete, where --alignment_file grows beside the output."""
    return None if alignment_output is None else alignment_output.progress(flags.FLAGS.start_over)[0]


def _collect(alignments):
    return None if alignments is None else alignments.extend


def _write_alignments(alignments) -> None:
    if alignments is not None:
        file_decoding.write_lines(_output_path(flags.FLAGS.alignment_file), alignments)


def _stopped_by(interrupt: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(interrupt, Terminated) else "interrupted"


def _check_files() -> None:
    """The input files' encodings and the output's directory, from the flags alone: a mistake
    is one line before the model (and TensorFlow) loads, and nothing is written. The output's
    directory is not created (`files.check_output_path`: a mistyped one is refused, as by `>`)."""
    FLAGS = flags.FLAGS
    for name in ("decode_from_file", "score_file", "decode_reference", *STEERING_FILES):
        if FLAGS[name].value:
            check_text_file(FLAGS[name].value, f"--{name}", empty_ok=True)
    if FLAGS.decode_to_file:
        files.check_output_path(_output_path(), "--decode_to_file")
    if FLAGS.alignment_file:
        files.check_output_path(_output_path(FLAGS.alignment_file), "--alignment_file")


def _written_lines(path: str) -> list[str]:
    """The lines of an output the decoder wrote, split where it ended them (at newlines only:
    str.splitlines would also split an output at a form feed or U+2028, off its input's line)."""
    return files.read_text(path).split("\n")[:-1]


def _refuse_to_replace(path: str) -> None:
    raise UsageError(f"--decode_to_file={path} exists; it is never replaced unasked: choose another --decode_to_file, "
                     "or pass --start_over to replace it.")


def _nothing_to_do(path: str, lines: int) -> int:
    print(f"{path} is complete ({lines} input lines); nothing to do (--start_over decodes it again).", file=sys.stderr)
    return 0


def _decode(translator, numbered_lines, write, report, total: int, done: int, steering=None,
            write_alignments=None) -> None:
    import tqdm

    bar = tqdm.tqdm(total=total, initial=done, unit=" lines", disable=not flags.FLAGS.progress, file=sys.stderr, mininterval=1.0)
    try:
        columns = _columns()
        translate_window = translator.window_translator(flags.FLAGS.n_best, log_probs="log_prob" in columns,
                                                        alignments=write_alignments is not None)
        file_decoding.decode_stream(translate_window, numbered_lines, write, file_decoding.window_lines(translator.settings),
                                    columns, report, progress=bar, steering=steering, write_alignments=write_alignments)
    finally:
        bar.close()  # before any message, so that none is glued to the bar


def _columns() -> tuple[str, ...]:
    """The Hypothesis fields written before each output (`file_decoding.output_lines`)."""
    FLAGS = flags.FLAGS
    return tuple(name for name, asked in (("score", FLAGS.with_scores), ("log_prob", FLAGS.with_log_probs)) if asked)


def _best_texts(lines: list[str], n_best: int) -> list[str]:
    columns = len(_columns())
    return [line.split("\t", columns)[columns] for line in lines[::n_best]]


def _summary(translator, report, stats, problem, reference, best, resumed: int, block: tuple[int, int]) -> None:
    summary = f"decoded {report.lines} lines with {', '.join(translator.checkpoint_paths)} ({report.empty_lines} empty)"
    if resumed:
        summary += f", after the {resumed} decoded before"
    invalid = [n for n in stats.invalid_utf8_line_numbers if block[0] < n <= block[1]]  # 1-based numbers
    if invalid:
        shown = ", ".join(str(n) for n in invalid[:20])
        summary += f"; invalid UTF-8 replaced on {len(invalid)} lines: {shown}"
    if report.repairs:
        summary += f"; {report.repairs} repairs to make the outputs well-formed"
    if report.missing_terms:
        shown = ", ".join(str(n) for n in report.missing_terms[:20])
        summary += (f"; {len(report.missing_terms)} lines miss a term of --constraints_file (no room within the maximum "
                    f"length: raise extra_length): {shown}")
    print(summary, file=sys.stderr)
    if reference is not None and best is not None:
        print(problem.score_outputs(best, reference).report, file=sys.stderr)


def _score(run) -> int:
    """--score_file: log P(target | source) of each pair, in memory (one forward pass per batch)."""
    FLAGS = flags.FLAGS
    sources = file_decoding.read_source_lines(FLAGS.decode_from_file, file_decoding.DecodeReport())
    targets = file_decoding.read_source_lines(FLAGS.score_file, file_decoding.DecodeReport(), "--score_file")
    if len(targets) != len(sources):
        raise UsageError(f"--score_file={FLAGS.score_file} has {len(targets)} lines, --decode_from_file has {len(sources)}; they must be aligned.")
    if FLAGS.decode_to_file and files.exists(FLAGS.decode_to_file) and not FLAGS.start_over:
        _refuse_to_replace(FLAGS.decode_to_file)
    run.checkpoints  # TensorFlow loads here
    from t2t_keras.translator import Translator

    # Scoring is one forward pass per batch, which wants every core per op: TensorFlow's default threads.
    translator = Translator.from_run(run, tune_process=False)
    lines = [f"{score:.4f}" for score in translator.score(sources, targets)]
    if FLAGS.decode_to_file:
        file_decoding.write_lines(FLAGS.decode_to_file, lines)
    else:
        sys.stdout.writelines(line + "\n" for line in lines)
    print(f"scored {len(lines)} pairs with {', '.join(translator.checkpoint_paths)}", file=sys.stderr)
    return 0


def run() -> None:
    common_flags.run(main, define_flags, common_flags.decode_settings_help())


if __name__ == "__main__":
    run()

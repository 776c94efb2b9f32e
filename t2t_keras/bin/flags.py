"""Flags every t2t-keras command shares, defined in functions so imports define no flags."""

import logging
import os
import shutil
import signal
import sys
import tempfile
import warnings
from pathlib import Path

from absl import app, flags

from t2t_keras import files, registry
from t2t_keras.errors import Stopped, Terminated, UsageError

FLAGS = flags.FLAGS


def define_registry_flags() -> None:
    """--t2t_usr_dir (user registrations) and --registry_help (list what is registered)."""
    flags.DEFINE_string(
        "t2t_usr_dir", None, "Directory of Python modules imported for their @register_* decorators."
    )
    flags.DEFINE_bool("registry_help", False, "Print the registered problems, hparams sets and models, then exit.")


def define_hparams_flags() -> None:
    """--hparams_set and --hparams, resolved by `resolve_hparams`."""
    flags.DEFINE_string("hparams_set", None, "Registered hparams set, e.g. transformer_base.")
    flags.DEFINE_string(
        "hparams", "", 'Comma-separated overrides of the set\'s fields, e.g. "num_hidden_layers=4,label_smoothing=0.2".'
    )


def load_registrations() -> bool:
    """Imports --t2t_usr_dir; prints the registries if --registry_help. True = stop now."""
    if FLAGS.t2t_usr_dir:
        registry.import_usr_dir(FLAGS.t2t_usr_dir)
    if FLAGS.registry_help:
        print(registry.help_string())
        return True
    return False


def resolve_hparams():
    """The HParams named by --hparams_set with --hparams applied."""
    if not FLAGS.hparams_set:
        raise UsageError("--hparams_set is required; e.g. --hparams_set=transformer_base (see --registry_help).")
    return registry.hparams(FLAGS.hparams_set, FLAGS.hparams)


def define_trained_run_flags(purpose: str) -> None:
    """--output_dir, --checkpoint_path and --decode_hparams of commands that use a trained model."""
    flags.DEFINE_string("output_dir", None, "The trainer's output_dir (or an averaged --avg_dir).")
    flags.DEFINE_string("checkpoint_path", None, f"A checkpoint to {purpose} instead of the latest, e.g. DIR/ckpt-50000.")
    flags.DEFINE_string(
        "decode_hparams", "",
        'Overrides of the problem\'s decode defaults, e.g. "beam_size=4,alpha=0.6,extra_length=50,sentences_per_batch=64" '
        "(all settings: t2t-keras-hparams --describe_decode).",
    )


def decode_settings_help() -> str:
    """The decode settings, described, for a command's --help."""
    from t2t_keras import hparams_lib

    return "decode settings (--decode_hparams=\"name=value,...\"; translation's defaults shown):\n" + hparams_lib.describe_fields(
        hparams_lib.DecodeHParams()
    )


def load_trained_run(check_checkpoint: bool = True, ensemble=(), for_export: bool = False, reverse: str | None = None):
    """The `TrainedRun` those flags name: resolved here, once, for the whole command. Checked
    before TensorFlow loads: one-line errors for a directory the trainer did not write or an
    unknown decode hparam; then, with `check_checkpoint`, for a missing checkpoint (finding the
    latest loads TensorFlow: a command with flags of its own to check reads `run.checkpoints`
    after them)."""
    from t2t_keras.decoding.trained_run import TrainedRun

    if not FLAGS.output_dir:
        raise UsageError("--output_dir is required: the trainer's output directory.")
    run = TrainedRun.resolve(FLAGS.output_dir, FLAGS.decode_hparams, FLAGS.checkpoint_path, ensemble, for_export, reverse)
    if check_checkpoint:
        run.checkpoints
    return run


# Flags naming directories a command creates: a run that fails leaves none of them behind
# empty (or their new parent directories).
CREATED_DIRECTORY_FLAGS = ("output_dir", "data_dir", "avg_dir", "export_dir", "plot_dir")
# Flags naming what a command writes: a write the filesystem refuses is one line naming the flag to change.
WRITTEN_PATH_FLAGS = (*CREATED_DIRECTORY_FLAGS, "decode_to_file")
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as shells report Ctrl-C
BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE, as shells report a writer whose reader went away


def run(main, define_flags, extra_help: str = "") -> None:
    """Defines the program's flags, then absl.app.run(main), so that the output is the
    command's own: a UsageError, a flag absl refuses or a filesystem's refusal (or Ctrl-C) is one line and exit status 2 (130), `--help`
    lists the command's flags (then `extra_help`), and TensorFlow's native logging, its Python INFO logs and
    library warnings are kept off the screen unless --verbosity=1 asks for them."""
    before = set(FLAGS)
    define_flags()
    own_flags = sorted(set(FLAGS) - before)
    if any(arg in ("--help", "-h", "-?", "--helpshort") for arg in sys.argv[1:]):
        print(_help(sys.modules[main.__module__].__doc__, own_flags) + (f"\n\n{extra_help}" if extra_help else ""))
        sys.exit(0)

    def guarded_main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments {argv[1:]}; every option is a --flag.")
        new_directories = _new_directories(own_flags)
        signal.signal(signal.SIGTERM, _terminate)  # a scheduler's stop is Ctrl-C's clean-up, status 143
        quiet = FLAGS.verbosity < 1
        native_log = _quiet_logging() if quiet else None
        status = 1
        try:
            written = {FLAGS[name].value: f"--{name}" for name in own_flags if name in WRITTEN_PATH_FLAGS and FLAGS[name].value}
            with warnings.catch_warnings(record=quiet) as caught, files.refused_writes_as_usage_errors(written):
                status = main(argv)
                sys.stdout.flush()  # here, so that a reader gone away is found inside this handler
            if caught:
                kinds = sorted({warning.category.__name__ for warning in caught})
                print(f"({len(caught)} library warnings hidden: {', '.join(kinds)}; --verbosity=1 shows them)", file=sys.stderr)
            return status
        except UsageError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 2
            return status
        except BrokenPipeError:  # the reader of stdout has gone (`| head -1`): quiet, as Unix tools end by SIGPIPE
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
            status = BROKEN_PIPE_STATUS
            return status
        except OSError as e:  # the filesystem refused (no such directory, no permission): one line naming the path
            print(f"error: {e.filename}: {e.strerror}" if e.filename else f"error: {e}", file=sys.stderr)
            status = 2
            return status
        except Stopped as e:
            print(str(e), file=sys.stderr)
            status = e.status
            return status
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM as errors.Terminated
            # A command may say what it kept (the decoder: how many lines); the default is the promise of every command.
            stopped_by = "SIGTERM" if isinstance(e, Terminated) else "interrupted"
            message = str(e) or f"{stopped_by}: finished files are kept and nothing half-written is left; rerun to continue."
            print(message, file=sys.stderr)
            status = e.status if isinstance(e, Terminated) else INTERRUPTED_STATUS
            return status
        except BaseException as e:
            if _is_filesystem_error(e):  # its message names the path, where the filesystem gives one
                message = e.message.strip().splitlines()[0] if e.message.strip() else f"{type(e).__name__} from tf.io.gfile"
                print(f"error: {message}", file=sys.stderr)
                status = 2
                return status
            if native_log is not None:  # an unexpected failure: everything TensorFlow said may help
                native_log.seek(0)
                sys.stderr.write(native_log.read().decode("utf-8", "replace"))
            raise
        finally:
            if status:
                _remove_if_empty(new_directories)

    app.run(guarded_main, flags_parser=_parse_flags)


def _terminate(signum, frame) -> None:
    raise Terminated()


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing of the command line, its refusals (an unknown flag, a value of the wrong
    type) one line and status 2 like any wrong input, instead of its "FATAL" and status 1."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        print(f"error: {' '.join(str(e).split())} (--help lists this command's flags)", file=sys.stderr)
        sys.exit(2)


def _is_filesystem_error(error: Exception) -> bool:
    """Whether `error` is tf.io.gfile's refusal of a path (gs://, s3://, ram://: its message names it)."""
    if "tensorflow" not in sys.modules:
        return False
    import tensorflow as tf

    return isinstance(error, (tf.errors.NotFoundError, tf.errors.PermissionDeniedError, tf.errors.AlreadyExistsError))


def _help(doc: str | None, names: list[str]) -> str:
    """The command's docstring and one line per flag of its own."""
    lines = [(doc or "").strip(), "", "flags:"]
    for name in names:
        flag = FLAGS[name]
        value = str(flag.default).lower() if isinstance(flag.default, bool) else flag.default
        default = "" if value in (None, "") else f" (default: {value})"
        lines.append(f"  --{name}: {' '.join(flag.help.split())}{default}")
    lines.append("  --verbosity=1: show TensorFlow's own logging; --helpfull: every flag, absl's and TensorFlow's too")
    return "\n".join(lines)


def _quiet_logging():
    """Plain progress lines (no absl prefix), TensorFlow's Python logging at ERROR, the
    libraries' INFO lines through absl dropped; the native stderr (file descriptor 2, where
    TensorFlow's C++ code logs its oneDNN, CUDA probing and CPU feature lines: noise on a CPU
    machine) goes to a temporary file, while Python's sys.stderr keeps the terminal. Returns
    that file (shown if the command crashes)."""
    from absl import logging as absl_logging

    sys.stderr.flush()
    terminal = os.dup(2)
    native_log = tempfile.TemporaryFile(prefix="t2t_keras_native_log_")
    os.dup2(native_log.fileno(), 2)
    sys.stderr = os.fdopen(terminal, "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    handler = absl_logging.get_absl_handler()
    handler.python_handler.setStream(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.python_handler.addFilter(_drop_library_info)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    return native_log


_LIBRARIES_LOGGING_THROUGH_ABSL = frozenset({"tensorflow", "keras", "tensorflow_text", "tensorflow_datasets"})


def _drop_library_info(record) -> bool:
    """False for the INFO lines libraries log through absl (TensorFlow's checkpoint saver says
    "Sharding callback duration" at every save); the package's lines and warnings pass."""
    return record.levelno >= logging.WARNING or not _LIBRARIES_LOGGING_THROUGH_ABSL.intersection(Path(record.pathname).parts)


def _new_directories(names: list[str]) -> list[str]:
    """For each directory flag of this command, the highest of its directories that does not exist
    yet (on a local disk: an object store has no empty directories to leave behind)."""
    from t2t_keras.files import absolute, is_local

    created = []
    for name in names:
        if name in CREATED_DIRECTORY_FLAGS and FLAGS[name].value and is_local(FLAGS[name].value):
            path = absolute(FLAGS[name].value)
            while not os.path.exists(os.path.dirname(path)):
                path = os.path.dirname(path)
            if not os.path.exists(path):
                created.append(path)
    return created


def _remove_if_empty(directories: list[str]) -> None:
    """Removes each directory that holds nothing but empty directories."""
    for top in directories:
        if os.path.isdir(top) and not any(files for _, _, files in os.walk(top)):
            shutil.rmtree(top, ignore_errors=True)

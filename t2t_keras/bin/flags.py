"""Flags every t2t-keras command shares, defined in functions so imports define no flags."""

import sys

from absl import app, flags

from t2t_keras import registry
from t2t_keras.errors import UsageError

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
        'Overrides of the problem\'s decode defaults, e.g. "beam_size=4,alpha=0.6,extra_length=50,sentences_per_batch=32".',
    )


def load_trained_run():
    """(RunDir, problem, DecodeHParams) named by those flags, checked before TensorFlow loads:
    one-line errors for a directory the trainer did not write, a missing checkpoint or an
    unknown decode hparam."""
    from t2t_keras import hparams_lib
    from t2t_keras.checkpoints import RunDir

    if not FLAGS.output_dir:
        raise UsageError("--output_dir is required: the trainer's output directory.")
    run_dir = RunDir(FLAGS.output_dir)
    run_dir.hparams()
    problem = run_dir.problem()
    decode_hparams = hparams_lib.apply_overrides(problem.decode_defaults, FLAGS.decode_hparams, "--decode_hparams").validated()
    run_dir.require_checkpoint(FLAGS.checkpoint_path)
    return run_dir, problem, decode_hparams


def run(main, define_flags) -> None:
    """Defines the program's flags, then absl.app.run(main) with a UsageError shown as one
    line and exit status 2."""
    define_flags()

    def guarded_main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments {argv[1:]}; every option is a --flag.")
        try:
            return main(argv)
        except UsageError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    app.run(guarded_main)

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

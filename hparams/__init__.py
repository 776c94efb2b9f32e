"""The built-in hparams sets, installed as `t2t_keras.hparams`.

The registry imports this package on its first lookup; the import list below is the whole
catalog. Add a module here to add sets.
"""

if __name__ != "t2t_keras.hparams":
    # From the repo root `import hparams` would load a second copy that registers every set
    # again; only the installed name is valid (install the package first: make, or pip install).
    raise ImportError(f"import this catalog as t2t_keras.hparams, not {__name__!r}")

from t2t_keras.hparams import transformer, transformer_parsing  # noqa: E402,F401

"""The built-in problems, installed as `t2t_keras.problems`.

The registry imports this package on its first lookup; the import list below is the whole
catalog. Add a module here to add problems.
"""

if __name__ != "t2t_keras.problems":
    # From the repo root `import problems` would load a second copy that registers every
    # problem again; only the installed name is valid (install the package first: make, or pip install).
    raise ImportError(f"import this catalog as t2t_keras.problems, not {__name__!r}")

from t2t_keras.problems import parsing_english, translate_multi30k, translate_text, translate_wmt14  # noqa: E402,F401

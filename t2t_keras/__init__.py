"""t2t-keras: the Transformer of "Attention Is All You Need" on TensorFlow 2 / Keras 3.

Keras 3 runs here on the TensorFlow backend only: tf.data, tf.distribute, tensorflow_text
and TF Serving are part of the design. Importing the package selects that backend, and
refuses to run if Keras was already set up with another one.
"""

import importlib
import os
import sys

__version__ = "0.1.0"

_backend = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if _backend != "tensorflow":
    raise ImportError(
        f"t2t_keras needs the Keras TensorFlow backend, but KERAS_BACKEND={_backend!r}; "
        "unset it or set KERAS_BACKEND=tensorflow."
    )
if "keras" in sys.modules and sys.modules["keras"].backend.backend() != "tensorflow":
    raise ImportError(
        "t2t_keras needs the Keras TensorFlow backend, but keras was imported with backend "
        f"{sys.modules['keras'].backend.backend()!r}; import t2t_keras first or set "
        "KERAS_BACKEND=tensorflow."
    )

# TensorFlow's native INFO lines (the CPU-feature note, CUDA probing) are not the package's
# output; warnings and errors still show. An explicit TF_CPP_MIN_LOG_LEVEL wins, and once
# TensorFlow is imported the setting no longer matters.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from t2t_keras import registry  # noqa: E402  (light: no TensorFlow import)

_LAZY_SUBPACKAGES = ("layers", "models", "optimization", "training")
# The Python API, importable from the top (`from t2t_keras import Translator, Transformer`) without
# paying for TensorFlow when only the registries are used (e.g. `--registry_help`).
_LAZY_NAMES = {
    "Translator": "t2t_keras.translator",
    "Hypothesis": "t2t_keras.decoding.hypothesis",
    "Transformer": "t2t_keras.models.transformer",
    "LabelSmoothedCrossEntropy": "t2t_keras.optimization.losses",
}


def __getattr__(name):
    if name in _LAZY_SUBPACKAGES or name in _LAZY_NAMES:
        from t2t_keras.system import start_tensorflow_quietly

        start_tensorflow_quietly()
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"t2t_keras.{name}")
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    raise AttributeError(f"module 't2t_keras' has no attribute {name!r}")


__all__ = ["__version__", "registry", *_LAZY_SUBPACKAGES, *_LAZY_NAMES]

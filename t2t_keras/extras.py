"""The optional dependencies: each serves one feature and is installed by one extra of
pyproject.toml (`pip install "t2t-keras[parsing]"`). Their modules are imported through
`require`, inside the functions of that feature, so that the rest of the package imports
and runs without them."""

import importlib
import sys

from t2t_keras.errors import UsageError

# extra -> (the top-level module it installs, the feature that needs it). pyproject.toml's
# [project.optional-dependencies] has one extra of each name (tests/test_extras.py checks).
EXTRAS = {
    "parsing": ("nltk", "constituency parsing (the parsing_english_* problems, t2t-keras-evalb)"),
    "plots": ("matplotlib", "attention plots (t2t-keras-visualize)"),
    "serving": ("tensorflow_serving", "a SavedModel export's TF Serving warm-up requests (t2t-keras-exporter)"),
    "paper-bleu": ("sacremoses", "the paper's Moses-tokenised BLEU (t2t-keras-bleu --paper_tokenized)"),
    "ctranslate2": ("ctranslate2", "the CTranslate2 export (t2t-keras-exporter --format=ctranslate2)"),
    "alignment": ("eflomal", "word alignments for guided alignment (t2t-keras-datagen --word_alignments)"),
}


def require(extra: str):
    """The module of `extra`, imported now if it is not yet; a one-line UsageError naming the
    feature and the pip install that brings it if it is not installed."""
    name, feature = EXTRAS[extra]
    module = sys.modules.get(name)
    if module is not None:  # the common case, cheap enough for a loop over tree nodes
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:  # a dependency of the package itself is missing: a broken install, not ours to explain
            raise
        raise UsageError(f'{feature} needs {name}, which is not installed: pip install "t2t-keras[{extra}]".') from None

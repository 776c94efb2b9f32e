"""Shared fixtures and paths for the suite."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

import t2t_keras  # noqa: E402,F401  (selects the TensorFlow backend first)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _seeded_float32():
    """Every test starts from the same seed and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")

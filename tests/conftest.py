"""Shared fixtures and paths for the suite."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_keras.system import keep_freed_memory  # noqa: E402

keep_freed_memory()  # as the CLIs do: the suite runs ~2x faster

import keras  # noqa: E402
import pytest  # noqa: E402

import t2t_keras  # noqa: E402,F401  (selects the TensorFlow backend first)
import tensorflow as tf  # noqa: E402

# Two logical CPU devices, so MirroredStrategy can run 2 replicas on this machine. Must
# happen before TensorFlow initialises its devices, i.e. before any test runs an op.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _seeded_float32():
    """Every test starts from the same seed and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def multi30k_data_dir(tmp_path_factory):
    """translate_ende_multi30k generated once for the session (full shipped data, ~10 s)."""
    from t2t_keras import registry
    from t2t_keras.data import datagen

    data_dir = tmp_path_factory.mktemp("multi30k_data")
    datagen.generate(registry.problem("translate_ende_multi30k"), str(data_dir), None, progress=False)
    return str(data_dir)

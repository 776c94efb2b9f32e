"""Shared fixtures and paths for the suite."""

import fcntl
import os
import shutil
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Ctrl-C as from a terminal, for the suite and the commands it starts (the Ctrl-C tests): a
# non-interactive shell starts background jobs with SIGINT ignored, and exec would pass that on.
signal.signal(signal.SIGINT, signal.default_int_handler)

from t2t_keras.system import keep_freed_memory  # noqa: E402

keep_freed_memory()  # as the CLIs do: the suite runs ~2x faster

import keras  # noqa: E402
import pytest  # noqa: E402

import t2t_keras  # noqa: E402,F401  (selects the TensorFlow backend first)
import tensorflow as tf  # noqa: E402

from tests.testing import seed_generators  # noqa: E402

# Two logical CPU devices, so MirroredStrategy can run 2 replicas on this machine. Must
# happen before TensorFlow initialises its devices, i.e. before any test runs an op.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)
# TensorFlow starts here, with its default threads: a Translator made later in the worker
# cannot set one thread per op for the tests after it (training wants every core per op).
tf.zeros([]).numpy()

# Seeded once for the session, not per test: tf.random.set_seed clears TensorFlow's eager
# kernel cache, which destroys the SentencePiece resources of tensorflow_text tokenizers
# built earlier (e.g. by a module-scoped Translator fixture).
keras.utils.set_random_seed(1234)


@pytest.fixture(autouse=True)
def _seeded(request):
    """Each test draws the same random numbers whichever tests ran before it in its worker."""
    seed_generators(request.node.nodeid)


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts (and ends) with the float32 dtype policy."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _made_once(tmp_path_factory, name, make):
    """The directory `make(path)` fills, made once for the whole run: the test workers share the
    run's temporary root, and whichever asks first makes it while the others wait (one per worker
    cost ~25 s of the suite's two cores). Tests that change it work on a copy."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / f"{name}.done").exists():  # else made, whole, by another worker
            shutil.rmtree(path, ignore_errors=True)  # a worker that died making it
            path.mkdir()
            make(path)
            (root / f"{name}.done").touch()
    return path


@pytest.fixture(scope="session")
def multi30k_data_dir(tmp_path_factory):
    """translate_ende_multi30k generated once for the run (full shipped data, ~10 s)."""
    from t2t_keras import registry
    from t2t_keras.data import datagen

    def make(data_dir):
        datagen.generate(registry.problem("translate_ende_multi30k"), str(data_dir), None, progress=False)

    return str(_made_once(tmp_path_factory, "multi30k_data", make))


TRAINED_HPARAMS = "hidden_size=32,filter_size=64,num_heads=2,tokens_per_batch=1024,max_length=64,learning_rate_warmup_steps=20"


@pytest.fixture(scope="session")
def trained_output_dir(multi30k_data_dir, tmp_path_factory):
    """A transformer_tiny (shrunk) output_dir trained 30 steps on translate_ende_multi30k, once for the run."""
    from t2t_keras import registry
    from t2t_keras.training import trainer

    def make(output_dir):
        seed_generators("trained_output_dir")  # the same model whichever test asks for it first
        settings = trainer.RunSettings(
            output_dir=str(output_dir), data_dir=multi30k_data_dir, train_steps=30, save_checkpoints_steps=30,
            log_steps=30, evaluate=False, seed=1,
        )
        trainer.train(
            registry.problem("translate_ende_multi30k"), registry.hparams("transformer_tiny", TRAINED_HPARAMS), settings,
            tf.distribute.OneDeviceStrategy("/cpu:0"),
        )

    return str(_made_once(tmp_path_factory, "trained", make))

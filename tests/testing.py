"""A shared layer-test harness: every layer gets the same serialization and call checks."""

import gzip
import dataclasses
import inspect
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
import zlib

import keras
import numpy as np
import tensorflow as tf

from t2t_keras.kernels import native


def seed_generators(name: str) -> None:
    """Python's and NumPy's generators seeded from `name`: Keras initialisers without a seed take
    one from Python's random module, so a random model was another model in each order of the
    tests before it in a worker (a bf16 search test failed once in a suite run, never alone).
    TensorFlow's own seed is not touched: setting it clears the kernel cache."""
    seed = zlib.crc32(name.encode())
    random.seed(seed)
    np.random.seed(seed)


SUM = tf.distribute.ReduceOp.SUM
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The kernel choices of trainer runs a test compares bit for bit: forced, so that no timing can
# make two runs differ (the native kernels where they build, so that resumes are tested with them).
_BUILT = native.library() is not None
SAME_KERNELS = {"loss_layout": "native_rows" if _BUILT else "columns",
                **dict.fromkeys(("layer_norm", "bias_relu"), "native" if _BUILT else "graph")}
SAME_KERNELS_FLAG = "--kernel_choices=" + ",".join(f"{name}={value}" for name, value in SAME_KERNELS.items())
VOCAB = 60  # the vocabulary of the update tests' hand-made batches


def run_layer_test(layer_cls, init_kwargs, call_kwargs, expected_output_shape, expected_num_trainable_weights):
    """Asserts for `layer_cls(**init_kwargs)` called as `layer(**call_kwargs)`:

    * eager call gives `expected_output_shape` and the expected weight count;
    * get_config -> from_config round trip gives a JSON-equal config and equal outputs
      once the weights are copied;
    * a symbolic call on keras.Input gives the shape with a free batch dimension;
    * every trainable weight receives a gradient;
    * under mixed_bfloat16 the output is bfloat16 and the weights stay float32.
    """
    layer = layer_cls(**init_kwargs)
    outputs = layer(**call_kwargs)
    assert tuple(outputs.shape) == tuple(expected_output_shape)
    assert len(layer.trainable_weights) == expected_num_trainable_weights

    config = layer.get_config()
    restored = layer_cls.from_config(json.loads(json.dumps(config)))
    assert json.dumps(restored.get_config(), sort_keys=True) == json.dumps(config, sort_keys=True)
    restored(**call_kwargs)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(restored(**call_kwargs), outputs, atol=1e-6)

    symbolic_kwargs = {
        name: keras.Input(shape=value.shape[1:], dtype=value.dtype) if _is_batched_array(value) else value
        for name, value in call_kwargs.items()
    }
    symbolic_outputs = layer_cls(**init_kwargs)(**symbolic_kwargs)
    assert tuple(symbolic_outputs.shape[1:]) == tuple(expected_output_shape[1:])

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(layer(**call_kwargs, **_training_kwarg(layer_cls))))
    gradients = tape.gradient(loss, layer.trainable_weights)
    assert all(g is not None for g in gradients), [w.path for w, g in zip(layer.trainable_weights, gradients) if g is None]

    mixed = layer_cls(**init_kwargs, dtype="mixed_bfloat16")
    mixed_outputs = mixed(**call_kwargs)
    assert mixed_outputs.dtype == "bfloat16"
    assert all(w.dtype == "float32" for w in mixed.weights)


def value_and_gradients(layer, x, upstream):
    """layer(x) and the gradients of sum(layer(x) * upstream) for x and each trainable weight:
    how a layer with a hand-written gradient is compared with the Keras layer it replaces."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)  # the hand-written gradients are the training ones
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    return y, tape.gradient(loss, [x, *layer.trainable_weights])


def _is_batched_array(value):
    return hasattr(value, "shape") and len(value.shape) >= 2 and value.shape[0] not in (None, 1)


def _training_kwarg(layer_cls):
    return {"training": True} if "training" in inspect.signature(layer_cls.call).parameters else {}


def assert_one_line_error(result, message_start):
    """A CLI run failed with status 2 and printed exactly one line on stderr: 'error: ...'
    (TensorFlow's own start-up lines are silenced by the command runner)."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith(message_start), result.stderr


def update_gradients(train_step, per_replica_features):
    """(All-reduced gradients, mean loss per target token) an update of `train_step` would
    apply to distributed features, from the same replica code; nothing is applied."""
    from t2t_keras.training.train_step import target_tokens

    def replica_fn(features):
        context = tf.distribute.get_replica_context()
        global_tokens = context.all_reduce(SUM, target_tokens(features))
        gradients, loss_sum = train_step.loss_sum_gradients(features, global_tokens)
        return context.all_reduce(SUM, gradients), context.all_reduce(SUM, loss_sum) / global_tokens

    return train_step.strategy.run(tf.function(replica_fn), args=(per_replica_features,))


def read_warmup_requests(path):
    """The PredictRequests of an export's TF Serving warmup file."""
    from tensorflow_serving.apis import prediction_log_pb2

    return [
        prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        for record in tf.data.TFRecordDataset(path)
    ]


# --- one optimizer update, on several paths (tests/training/test_train_step.py, test_multi_worker.py) ---

def update_hparams(**changes):
    from t2t_keras import registry

    hp = dataclasses.replace(
        registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64, layer_prepostprocess_dropout=0.0,
        learning_rate_warmup_steps=10,
    )
    return dataclasses.replace(hp, **changes)


def aggregation_hparams():
    """update_hparams for comparing updates across replicas, workers or accumulation steps.

    With the paper's epsilon (1e-9) Adam's update g/(|g|+eps) is ill-conditioned for weights
    whose gradient is float noise: summation order alone moved one such weight by 2.3e-4.
    epsilon 1e-4 bounds that sensitivity (lr/eps), leaving differences of ~1e-7 against
    updates of ~3e-2, so a tight tolerance still catches a wrong aggregation.
    """
    return update_hparams(adam_epsilon=1e-4)


def global_batch():
    """8 sentence pairs with different amounts of padding (token counts differ per half)."""
    rng = np.random.default_rng(3)
    inputs = rng.integers(3, VOCAB, (8, 7))
    targets = rng.integers(3, VOCAB, (8, 9))
    for i, (source_length, target_length) in enumerate([(7, 9), (3, 2), (5, 9), (1, 4), (6, 6), (7, 1), (2, 8), (4, 3)]):
        inputs[i, source_length:] = 0
        targets[i, target_length:] = 0
    return {"inputs": tf.constant(inputs, tf.int32), "targets": tf.constant(targets, tf.int32)}



def build_train_step(strategy, hparams, initial_weights=None):
    """(model, TrainStep) as the trainer builds them, in hparams.mixed_precision's dtype policy."""
    from t2t_keras.models import Transformer
    from t2t_keras.optimization.recipe import make_optimizer
    from t2t_keras.training.train_step import TrainStep

    with strategy.scope():
        model = Transformer.from_hparams(hparams, VOCAB, dtype=hparams.mixed_precision)
        if initial_weights is not None:
            model.set_weights(initial_weights)
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    return model, step



def split_for_replicas(strategy, batch, parts):
    """Per-replica halves of one global batch, each replica getting sentences [i*n/parts, (i+1)*n/parts)."""
    size = batch["inputs"].shape[0] // parts
    return strategy.experimental_distribute_values_from_function(
        lambda context: {k: v[context.replica_id_in_sync_group * size : (context.replica_id_in_sync_group + 1) * size] for k, v in batch.items()}
    )



def halves(batch):
    return [{k: v[:4] for k, v in batch.items()}, {k: v[4:] for k, v in batch.items()}]



def cycle(*batches):
    """A dataset repeating `batches` in order (replicas, or accumulation steps, take them in turn)."""
    dataset = tf.data.Dataset.from_tensors(batches[0])
    for batch in batches[1:]:
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
    return dataset.repeat()



def train_updates(strategy, hparams, initial_weights, batches, updates=3):
    model, step = build_train_step(strategy, hparams, initial_weights)
    iterator = iter(strategy.distribute_datasets_from_function(lambda context: cycle(*batches)))
    losses = [float(step.update(iterator)[0]) for _ in range(updates)]
    return model.get_weights(), losses, int(step.optimizer.iterations.numpy())




def write_corpus_slice(tmp_dir, train_lines=2000, dev_lines=100):
    """Plain-text train.{en,de} and dev.{en,de} cut from the shipped Multi30k train set."""
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

    os.makedirs(tmp_dir, exist_ok=True)
    for language in ("en", "de"):
        with gzip.open(os.path.join(MULTI30K_DIR, f"train.{language}.gz"), "rb") as handle:
            lines = handle.readlines()
        with open(os.path.join(tmp_dir, f"train.{language}"), "wb") as out:
            out.writelines(lines[:train_lines])
        with open(os.path.join(tmp_dir, f"dev.{language}"), "wb") as out:
            out.writelines(lines[train_lines : train_lines + dev_lines])
    return str(tmp_dir)


def popen_interruptible(command, **kwargs) -> subprocess.Popen:
    """Starts `command` as a terminal would, SIGINT at its default: a parent started in the
    background (nohup make test &) passes SIGINT down ignored, and Python then installs no
    Ctrl-C handler, so a test of Ctrl-C would pass or fail by how the suite was started."""
    return subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kwargs)


def interrupt_while(process: subprocess.Popen, unfinished, signum=signal.SIGINT) -> bool:
    """Ctrl-C (or `signum`, e.g. SIGKILL) for `process` at a moment when `unfinished()` is still
    true: the process is paused (SIGSTOP) while that is checked, and the signal waits for it to go
    on, so it cannot arrive after the work it should cut short (CI once saw datagen end with status
    0 after a SIGINT: most likely one that came as it was already exiting). False, and nothing
    sent, if the work was done by then."""
    process.send_signal(signal.SIGSTOP)
    try:
        while process.poll() is None and _process_state(process.pid) not in ("T", "Z"):
            time.sleep(0.001)  # SIGSTOP takes effect when the process next enters the kernel
        if process.poll() is not None or not unfinished():
            return False
        process.send_signal(signum)
        return True
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)


def _process_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat (T: stopped, Z: exited, not yet reaped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def refusal_probe(module: str, *args: str) -> list[str]:
    """The command line of t2t_keras.bin.`module` with `args`, run so that it also prints its exit
    status and whether TensorFlow was imported on stdout ("2 False": refused before TensorFlow
    loaded); its own exit status and stderr are kept (for `assert_one_line_error`)."""
    argv = [module, *args]
    return [sys.executable, "-c", f"import runpy, sys\nsys.argv = {argv!r}\ntry:\n"
            f"    runpy.run_module('t2t_keras.bin.{module}', run_name='__main__')\n"
            "except SystemExit as e:\n    print(e.code, 'tensorflow' in sys.modules)\n    raise\n"]


def run_side_by_side(commands, **kwargs):
    """subprocess.run for several commands at once (they start together and share the cores):
    their CompletedProcesses, in order. For the one-line-error cases of a CLI."""
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
                 for command in commands]
    results = []
    for command, process in zip(commands, processes):
        stdout, stderr = process.communicate()
        results.append(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))
    return results


class FixedTokenFilter:
    """A `beam_search.TokenFilter` allowing the same tokens at every step: `allowed_tokens`, one
    bool per vocabulary id (parsing's constraint is a stateful one)."""

    def __init__(self, allowed_tokens):
        self.allowed_tokens = list(allowed_tokens)

    def initial_state(self, input_ids, beam_size):
        import tensorflow as tf

        return tf.zeros([tf.shape(input_ids)[0] * beam_size], tf.int32)

    def update(self, state, ids):
        return state

    def allowed(self, state, room):
        import tensorflow as tf

        return tf.tile(tf.constant([self.allowed_tokens]), [tf.shape(state)[0], 1])


def source_copy(directory) -> pathlib.Path:
    """The working tree's files a build reads, copied to `directory`: builds in the checkout
    would share its build/ folder between the test workers."""
    import shutil

    ignored = shutil.ignore_patterns(".git", ".venv", ".venvs", "out", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
    return pathlib.Path(shutil.copytree(REPO_ROOT, pathlib.Path(directory) / "source", ignore=ignored))


def build_wheel(directory) -> pathlib.Path:
    """The working tree's wheel, built in `directory` offline with the venv's setuptools."""
    source = source_copy(directory)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(directory), str(source)],
                   check=True, capture_output=True)
    (wheel,) = pathlib.Path(directory).glob("t2t_keras-*.whl")
    return wheel


def trained_with_another_vocabulary(run_dir, model_proto: bytes) -> None:
    """`run_dir` as if its model had been trained with the SentencePiece model `model_proto`: the
    file and run.json's record of it both replaced (a swapped file alone is refused as such)."""
    import json

    from t2t_keras.data.tokenizers import Vocabulary

    vocabulary = Vocabulary(model_proto)
    run_dir = pathlib.Path(run_dir)
    (run_dir / "vocab.spm.model").write_bytes(model_proto)
    record = json.loads((run_dir / "run.json").read_text())
    record.update(vocab_sha256=vocabulary.sha256, vocab_pieces_sha256=vocabulary.pieces_sha256, vocab_size=vocabulary.size)
    (run_dir / "run.json").write_text(json.dumps(record))

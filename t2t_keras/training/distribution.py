"""Choosing the tf.distribute strategy from --distribution_strategy."""

import tensorflow as tf

from t2t_keras.errors import UsageError

STRATEGIES = ("auto", "mirrored", "multi_worker_mirrored", "one_device")


def make_strategy(name: str) -> tf.distribute.Strategy:
    """auto: MirroredStrategy over all local GPUs (one device if there is one GPU or none);
    mirrored: MirroredStrategy over the local GPUs (or the CPU);
    multi_worker_mirrored: MultiWorkerMirroredStrategy configured by TF_CONFIG, one command per worker;
    one_device: the first GPU, or the CPU.
    """
    if name == "multi_worker_mirrored":  # first: collectives must be set up before devices are listed
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else make_strategy("one_device")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    raise UsageError(f"--distribution_strategy={name}: must be one of {', '.join(STRATEGIES)}.")


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether the strategy spans several workers (hosts), each running the same command."""
    return strategy.extended._in_multi_worker_mode()  # noqa: SLF001 (tf.distribute has no public test)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this worker writes checkpoints, summaries and logs (worker 0, or a single worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0)

"""TFRecord shards of tf.train.Example {inputs, targets: int64 lists; with word alignments,
alignment: (source piece + 1, target piece + 1) after another}, written atomically."""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import tensorflow as tf

from t2t_keras import files
from t2t_keras.errors import UsageError

FEATURES = ("inputs", "targets")
ALIGNMENT = "alignment"  # the piece links of guided alignment (data/word_alignments.py), 0 = none


def shard_names(prefix: str, num_shards: int) -> list[str]:
    """tensor2tensor-style names: prefix-00000-of-00004."""
    return [f"{prefix}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def serialize_example(inputs: Sequence[int], targets: Sequence[int], alignment: Sequence[int] | None = None) -> bytes:
    feature = {
        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=inputs)),
        "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=targets)),
    }
    if alignment is not None:
        feature[ALIGNMENT] = tf.train.Feature(int64_list=tf.train.Int64List(value=alignment))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)  # map order would vary per process


@contextlib.contextmanager
def atomic_shard_writers(paths: Sequence[str]) -> Iterator[list]:
    """TFRecord writers of `paths`, which appear under their names only when all succeed.

    An exception (or a kill) leaves only `.incomplete.*` files, which never look like data;
    `files.remove_incomplete` clears them before the next run.
    """
    with files.atomic_paths(paths) as temporaries:
        writers = [tf.io.TFRecordWriter(path) for path in temporaries]
        try:
            yield writers
        finally:
            for writer in writers:
                writer.close()


def tf_record_writer(path: str):
    return tf.io.TFRecordWriter(path)


def read_records(path: str) -> Iterator[bytes]:
    """The serialized records of one TFRecord file, in order."""
    for block in tf.data.TFRecordDataset(path).batch(4096):  # a block at a time: far fewer calls into TensorFlow
        yield from block.numpy().tolist()


def parse_examples(serialized, alignment: bool = False):
    """(inputs, targets[, alignment]): int32 RaggedTensors [N, None] from a vector of serialized Examples."""
    names = (*FEATURES, ALIGNMENT) if alignment else FEATURES
    spec = {name: tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int32) for name in names}
    parsed = tf.io.parse_example(serialized, spec)
    return tuple(tf.cast(parsed[name], tf.int32) for name in names)


def count_and_check(paths: Sequence[str]) -> int:
    """Reads every record of `paths`; a corrupt shard is a UsageError naming it."""
    total = 0
    for path in paths:
        try:
            total += sum(1 for _ in tf.data.TFRecordDataset(path))
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise UsageError(
                f"{path}: corrupt TFRecord shard ({e.message.splitlines()[0]}); rerun t2t-keras-datagen with --overwrite."
            ) from None
    return total

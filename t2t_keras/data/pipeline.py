"""tf.data over TFRecord shards: parse, filter, bucket by length, batch by a token budget.

As in tensor2tensor, a batch is sized in tokens, not sentences: pairs are grouped into
length buckets (boundaries growing by 10%) and each bucket's batch holds as many pairs as
fit in the budget at the bucket's longest length, so sentences x padded length <= budget
and little of a batch is padding. Under tf.distribute each replica's pipeline gets its own
budget (`distribute_datasets_from_function`), so the global batch grows with replicas.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_keras.data.tfrecords import ALIGNMENT, parse_examples

SHUFFLE_BUFFER = 10_000
PARSE_BLOCK = 512
MIN_BUCKET_LENGTH = 8
BUCKET_STEP = 1.1


def bucket_boundaries(max_length: int, min_length: int = MIN_BUCKET_LENGTH, step: float = BUCKET_STEP) -> list[int]:
    """Exclusive upper bounds of the length buckets, ending at max_length + 1."""
    boundaries, length = [], min_length
    while length <= max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * step))
    return boundaries + [max_length + 1]


def pair_length(example) -> tf.Tensor:
    """The length that counts against the budget: the longer side of the pair."""
    return tf.maximum(tf.shape(example["inputs"])[0], tf.shape(example["targets"])[0])


def batched_dataset(files, tokens_per_batch: int, training: bool, max_length: int = 0, input_context=None, seed=None,
                    resegmenters=None, alignments: bool = False):
    """Token-budget batches {"inputs": [B, S], "targets": [B, T]} (int32, 0-padded) from `files`;
    with `alignments`, also "alignment" [B, 2L] (each pair's piece links, 0-padded: tfrecords.ALIGNMENT).

    Training reads shards interleaved and shuffled, drops pairs longer than `max_length`
    (default: the budget) and repeats forever. Otherwise one pass in file order (the
    bucketing order is deterministic); pairs longer than the budget come one per batch.
    `resegmenters`: a (source, target) pair of `Vocabulary.sampled_resegmenter`s (training's
    subword sampling), applied to every pair as it is read, before the length filter and the bucketing.
    """
    max_length = max_length or tokens_per_batch
    if max_length > tokens_per_batch:
        raise ValueError(f"max_length={max_length} exceeds the token budget tokens_per_batch={tokens_per_batch}.")
    records, shard_records = tf.data.Dataset.from_tensor_slices(list(files)), False
    if input_context is not None and input_context.num_input_pipelines > 1:
        if len(files) >= input_context.num_input_pipelines:
            records = records.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        else:
            shard_records = True
    if training:
        records = records.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
        records = records.interleave(
            tf.data.TFRecordDataset, cycle_length=min(len(files), 8), num_parallel_calls=tf.data.AUTOTUNE
        )
    else:
        records = tf.data.TFRecordDataset(records)
    if shard_records:
        records = records.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    keep_up_to = max_length if training else None
    examples = records.batch(PARSE_BLOCK).flat_map(lambda block: _parse_block(block, keep_up_to, resegmenters, alignments))
    examples = examples.map(_dense_example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training or seed is not None)
    if training:
        examples = examples.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
    boundaries = bucket_boundaries(max_length)
    batch_sizes = [max(1, tokens_per_batch // (upper - 1)) for upper in boundaries] + [1]
    batches = examples.bucket_by_sequence_length(
        pair_length, boundaries, batch_sizes, pad_to_bucket_boundary=False, drop_remainder=False
    )
    return batches.prefetch(tf.data.AUTOTUNE)


def _parse_block(serialized, keep_up_to, resegmenters, alignments=False):
    """A block of serialized Examples -> a dataset of its pairs (segmented anew by `resegmenters`
    if given; with their piece links if `alignments`), dropping those over `keep_up_to`.

    Parsing and filtering a block at once costs a fraction of doing it per record.
    """
    parsed = dict(zip(("inputs", "targets", ALIGNMENT), parse_examples(serialized, alignments)))
    if resegmenters is not None:
        parsed["inputs"], parsed["targets"] = resegmenters[0](parsed["inputs"]), resegmenters[1](parsed["targets"])
    if keep_up_to is not None:
        keep = tf.maximum(parsed["inputs"].row_lengths(), parsed["targets"].row_lengths()) <= keep_up_to
        parsed = {name: tf.ragged.boolean_mask(value, keep) for name, value in parsed.items()}
    return tf.data.Dataset.from_tensor_slices(parsed)


def _dense_example(example):
    """Rows sliced from a ragged block are rank-0-ragged; batching wants plain tensors."""
    return {name: tensor.flat_values if isinstance(tensor, tf.RaggedTensor) else tensor for name, tensor in example.items()}

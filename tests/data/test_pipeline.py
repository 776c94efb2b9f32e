"""Token-budget batching over the real Multi30k shards."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.data import pipeline
from t2t_keras.token_ids import EOS_ID

BUDGET = 2048


@pytest.fixture(scope="module")
def problem():
    return registry.problem("translate_ende_multi30k")


def _epoch(problem, data_dir, split="train", budget=BUDGET, **kwargs):
    """One pass over `split` with the given budget, in evaluation order (no repeat)."""
    return list(problem.dataset(split, data_dir, budget, training=False, **kwargs).as_numpy_iterator())


def test_bucket_boundaries():
    boundaries = pipeline.bucket_boundaries(64)
    assert boundaries[0] == 8 and boundaries[-1] == 65
    assert all(b2 > b1 for b1, b2 in zip(boundaries, boundaries[1:]))
    assert all(b2 <= max(b1 + 1, int(b1 * 1.1)) for b1, b2 in zip(boundaries[:-2], boundaries[1:-1]))


def test_every_batch_respects_the_budget_and_padding_is_small(problem, multi30k_data_dir):
    batches = _epoch(problem, multi30k_data_dir)
    pairs = real = padded = 0
    for batch in batches:
        inputs, targets = batch["inputs"], batch["targets"]
        assert inputs.dtype == np.int32 and targets.dtype == np.int32
        assert inputs.shape[0] == targets.shape[0]
        assert inputs.shape[0] * max(inputs.shape[1], targets.shape[1]) <= BUDGET
        pairs += inputs.shape[0]
        real += (inputs != 0).sum() + (targets != 0).sum()
        padded += inputs.size + targets.size
    assert pairs == 28000
    padding = 1 - real / padded
    assert padding < 0.20, f"{padding:.1%} of the tokens of an epoch are padding"


def test_examples_are_eos_terminated_and_zero_padded(problem, multi30k_data_dir):
    batch = _epoch(problem, multi30k_data_dir, "dev")[0]
    for row in batch["targets"]:
        length = int((row != 0).sum())
        assert row[length - 1] == EOS_ID and (row[length:] == 0).all()


def test_evaluation_order_is_deterministic(problem, multi30k_data_dir):
    first, second = _epoch(problem, multi30k_data_dir, "dev"), _epoch(problem, multi30k_data_dir, "dev")
    assert len(first) == len(second)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert sum(batch["inputs"].shape[0] for batch in first) == 1014


def test_training_filters_long_pairs_shuffles_and_repeats(problem, multi30k_data_dir):
    dataset = problem.dataset("train", multi30k_data_dir, BUDGET, training=True, max_length=20, seed=7)
    batches = list(dataset.take(40).as_numpy_iterator())
    assert max(max(b["inputs"].shape[1], b["targets"].shape[1]) for b in batches) <= 20
    assert all(b["inputs"].shape[0] * max(b["inputs"].shape[1], b["targets"].shape[1]) <= BUDGET for b in batches)
    again = list(problem.dataset("train", multi30k_data_dir, BUDGET, training=True, max_length=20, seed=8).take(3).as_numpy_iterator())
    assert any(a["inputs"].shape != b["inputs"].shape or (a["inputs"] != b["inputs"]).any() for a, b in zip(batches, again))
    # repeat(): the stream goes on past the 28000 training pairs of an epoch.
    pairs = dataset.take(600).reduce(0, lambda total, batch: total + tf.shape(batch["inputs"])[0])
    assert int(pairs) > 28000


def test_over_budget_pairs_come_alone_in_evaluation(problem, multi30k_data_dir):
    batches = _epoch(problem, multi30k_data_dir, "dev", budget=32)
    long_batches = [b for b in batches if max(b["inputs"].shape[1], b["targets"].shape[1]) > 32]
    assert long_batches and all(b["inputs"].shape[0] == 1 for b in long_batches)
    assert sum(b["inputs"].shape[0] for b in batches) == 1014


def test_max_length_above_budget_is_rejected(problem, multi30k_data_dir):
    with pytest.raises(ValueError, match="max_length=300 exceeds the token budget tokens_per_batch=256"):
        problem.dataset("train", multi30k_data_dir, 256, training=True, max_length=300)


@pytest.mark.parametrize("num_pipelines", [2, 8])
def test_input_pipelines_read_disjoint_shares(problem, multi30k_data_dir, num_pipelines):
    """Per-worker pipelines (tf.distribute InputContext) split the data: by shard or by record."""
    def sentences(batches):
        return collections.Counter(tuple(row[row != 0]) for batch in batches for row in batch["inputs"])

    shares = collections.Counter()
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id, num_replicas_in_sync=num_pipelines)
        share = sentences(_epoch(problem, multi30k_data_dir, "train", input_context=context))
        assert 0 < sum(share.values()) < 28000
        shares += share
    assert shares == sentences(_epoch(problem, multi30k_data_dir, "train"))  # a partition of the epoch


def test_distributed_dataset_gives_each_replica_its_budget(problem, multi30k_data_dir):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dataset = strategy.distribute_datasets_from_function(
        lambda context: problem.dataset("train", multi30k_data_dir, BUDGET, training=True, input_context=context, seed=1)
    )
    batch = next(iter(dataset))
    inputs = strategy.experimental_local_results(batch["inputs"])[0]
    assert inputs.shape[0] * inputs.shape[1] <= BUDGET


def test_subword_sampling_reads_the_written_text_in_sampled_segmentations(problem, multi30k_data_dir):
    """The subword_sampling hparam (BPE-dropout on this BPE vocabulary): every training pair is
    a pair datagen wrote, each side EOS-terminated once, in a sampled segmentation: ~40% more
    pieces (merges dropped with p = 0.1), almost all unlike the written ones; evaluation reads them
    as written."""
    vocabulary = problem.load_vocabularies(multi30k_data_dir).source  # shared by both sides
    written = {}  # (source text, target text) -> (source ids, target ids), as datagen wrote them
    for batch in _epoch(problem, multi30k_data_dir):
        for inputs, targets in zip(batch["inputs"], batch["targets"]):
            pair = [row[row != 0].tolist() for row in (inputs, targets)]
            written[tuple(vocabulary.decode(ids) for ids in pair)] = pair
    sampled = problem.dataset("train", multi30k_data_dir, BUDGET, training=True, seed=7, subword_sampling=0.1)
    sides = same = sampled_pieces = written_pieces = 0
    for batch in sampled.take(10).as_numpy_iterator():
        for inputs, targets in zip(batch["inputs"], batch["targets"]):
            pair = [row[row != 0].tolist() for row in (inputs, targets)]
            texts = tuple(vocabulary.decode(ids) for ids in pair)
            assert texts in written, f"{texts!r} is not a pair datagen wrote"
            for ids, as_written in zip(pair, written[texts]):
                assert ids[-1] == EOS_ID and ids.count(EOS_ID) == 1
                sides += 1
                same += ids == as_written
                sampled_pieces += len(ids)
                written_pieces += len(as_written)
    assert sides > 1000
    assert 1.15 < sampled_pieces / written_pieces < 1.8, sampled_pieces / written_pieces
    assert same / sides < 0.5, same / sides
    evaluation = problem.dataset("dev", multi30k_data_dir, BUDGET, training=False, subword_sampling=0.1)
    for ours, as_written in zip(evaluation.as_numpy_iterator(), _epoch(problem, multi30k_data_dir, "dev")):
        np.testing.assert_array_equal(ours["targets"], as_written["targets"])

"""The update is the same on 2 replicas, 1 replica, and with accumulated batches."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.models import Transformer
from t2t_keras.training.train_step import TrainStep, make_optimizer

VOCAB = 60


def _hparams(**changes):
    hp = dataclasses.replace(
        registry.hparams("transformer_tiny"), hidden_size=32, filter_size=64, layer_prepostprocess_dropout=0.0,
        learning_rate_warmup_steps=10,
    )
    return dataclasses.replace(hp, **changes)


def _global_batch():
    """8 sentence pairs with different amounts of padding (token counts differ per half)."""
    rng = np.random.default_rng(3)
    inputs = rng.integers(3, VOCAB, (8, 7))
    targets = rng.integers(3, VOCAB, (8, 9))
    for i, (source_length, target_length) in enumerate([(7, 9), (3, 2), (5, 9), (1, 4), (6, 6), (7, 1), (2, 8), (4, 3)]):
        inputs[i, source_length:] = 0
        targets[i, target_length:] = 0
    return {"inputs": tf.constant(inputs, tf.int32), "targets": tf.constant(targets, tf.int32)}


def _build(strategy, hparams, initial_weights=None):
    with strategy.scope():
        model = Transformer.from_hparams(hparams, VOCAB)
        if initial_weights is not None:
            model.set_weights(initial_weights)
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    return model, step


def _split(strategy, batch, parts):
    """Per-replica halves of one global batch, each replica getting sentences [i*n/parts, (i+1)*n/parts)."""
    size = batch["inputs"].shape[0] // parts
    return strategy.experimental_distribute_values_from_function(
        lambda context: {k: v[context.replica_id_in_sync_group * size : (context.replica_id_in_sync_group + 1) * size] for k, v in batch.items()}
    )


def test_two_replicas_give_the_loss_and_gradients_of_one():
    hparams = _hparams()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    model_one, step_one = _build(one, hparams)
    _, step_two = _build(two, hparams, model_one.get_weights())
    batch = _global_batch()
    grads_one, loss_one = step_one.gradients(_split(one, batch, 1))
    grads_two, loss_two = step_two.gradients(_split(two, batch, 2))
    loss_two = two.experimental_local_results(loss_two)
    np.testing.assert_allclose(float(loss_two[0]), float(loss_one), atol=1e-5)
    np.testing.assert_allclose(float(loss_two[1]), float(loss_one), atol=1e-5)
    for g_one, g_two in zip(grads_one, grads_two):
        for replica_value in two.experimental_local_results(g_two):
            np.testing.assert_allclose(tf.convert_to_tensor(replica_value), tf.convert_to_tensor(g_one), atol=1e-5)


def _halves(batch):
    return [{k: v[:4] for k, v in batch.items()}, {k: v[4:] for k, v in batch.items()}]


def _cycle(*batches):
    """A dataset repeating `batches` in order (replicas, or accumulation steps, take them in turn)."""
    dataset = tf.data.Dataset.from_tensors(batches[0])
    for batch in batches[1:]:
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
    return dataset.repeat()


def _train(strategy, hparams, initial_weights, batches, updates=3):
    model, step = _build(strategy, hparams, initial_weights)
    iterator = iter(strategy.distribute_datasets_from_function(lambda context: _cycle(*batches)))
    losses = [float(step.update(iterator)[0]) for _ in range(updates)]
    return model.get_weights(), losses, int(step.optimizer.iterations.numpy())


def test_updates_agree_across_replicas_and_accumulation():
    """1 device x full batch == 2 replicas x half == 1 device x 2 accumulated halves."""
    # With the paper's epsilon (1e-9) Adam's update g/(|g|+eps) is ill-conditioned for weights
    # whose gradient is float noise: summation order alone moved one such weight by 2.3e-4.
    # epsilon 1e-4 bounds that sensitivity (lr/eps), leaving differences of ~1e-7 against
    # updates of ~3e-2, so a tight tolerance still catches a wrong aggregation.
    hparams = _hparams(adam_epsilon=1e-4)
    batch = _global_batch()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    initial = _build(one, hparams)[0].get_weights()
    reference, reference_losses, iterations = _train(one, hparams, initial, [batch])
    assert iterations == 3
    results = {
        "2 replicas": _train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), hparams, initial, _halves(batch)),
        "2 accumulated": _train(one, dataclasses.replace(hparams, gradient_accumulation_steps=2), initial, _halves(batch)),
    }
    for name, (weights, losses, iterations) in results.items():
        assert iterations == 3, name
        np.testing.assert_allclose(losses, reference_losses, atol=1e-5, err_msg=name)
        for got, want in zip(weights, reference):
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)
    assert not np.allclose(reference[0], initial[0])  # the updates did change the weights


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_updates_are_finite(policy):
    hparams = _hparams(mixed_precision=policy)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = Transformer.from_hparams(hparams, VOCAB, dtype=policy)
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    assert model.dtype_policy.name == policy
    iterator = iter(strategy.distribute_datasets_from_function(lambda context: _cycle(_global_batch())))
    losses = [float(step.update(iterator)[0]) for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert all(w.dtype == "float32" for w in model.trainable_weights)

"""The update is the same on 2 replicas, 1 replica, and with accumulated batches."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.models import Transformer
from t2t_keras.optimization.recipe import make_optimizer
from t2t_keras.training.train_step import TrainStep
from tests.testing import (
    VOCAB, build_train_step, cycle, global_batch, halves, split_for_replicas, train_updates, update_gradients, update_hparams,
    aggregation_hparams,
)


def test_two_replicas_give_the_loss_and_gradients_of_one():
    hparams = update_hparams()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    model_one, step_one = build_train_step(one, hparams)
    _, step_two = build_train_step(two, hparams, model_one.get_weights())
    batch = global_batch()
    grads_one, loss_one = update_gradients(step_one, split_for_replicas(one, batch, 1))
    grads_two, loss_two = update_gradients(step_two, split_for_replicas(two, batch, 2))
    loss_two = two.experimental_local_results(loss_two)
    np.testing.assert_allclose(float(loss_two[0]), float(loss_one), atol=1e-5)
    np.testing.assert_allclose(float(loss_two[1]), float(loss_one), atol=1e-5)
    for g_one, g_two in zip(grads_one, grads_two):
        for replica_value in two.experimental_local_results(g_two):
            np.testing.assert_allclose(tf.convert_to_tensor(replica_value), tf.convert_to_tensor(g_one), atol=1e-5)


def test_updates_agree_across_replicas_and_accumulation():
    """1 device x full batch == 2 replicas x half == 1 device x 2 accumulated halves; and R-Drop,
    which runs each batch twice, is the same update without dropout (the two predictions agree,
    the doubled batch is counted twice), here through accumulation too."""
    hparams = aggregation_hparams()
    assert hparams.layer_prepostprocess_dropout == hparams.attention_dropout == hparams.relu_dropout == 0.0
    batch = global_batch()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    initial = build_train_step(one, hparams)[0].get_weights()
    reference, reference_losses, iterations = train_updates(one, hparams, initial, [batch])
    assert iterations == 3
    results = {
        "2 replicas": train_updates(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), hparams, initial, halves(batch)),
        "2 accumulated": train_updates(one, dataclasses.replace(hparams, gradient_accumulation_steps=2), initial, halves(batch)),
        "R-Drop, 2 accumulated": train_updates(
            one, dataclasses.replace(hparams, rdrop_alpha=0.5, gradient_accumulation_steps=2), initial, halves(batch)
        ),
    }
    for name, (weights, losses, iterations) in results.items():
        assert iterations == 3, name
        np.testing.assert_allclose(losses, reference_losses, atol=1e-5, err_msg=name)
        for got, want in zip(weights, reference):
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)
    assert not np.allclose(reference[0], initial[0])  # the updates did change the weights


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_updates_are_finite(policy):
    hparams = update_hparams(mixed_precision=policy)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = Transformer.from_hparams(hparams, VOCAB, dtype=policy)
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    assert model.dtype_policy.name == policy
    iterator = iter(strategy.distribute_datasets_from_function(lambda context: cycle(global_batch())))
    losses = [float(step.update(iterator)[0]) for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert all(w.dtype == "float32" for w in model.trainable_weights)


def test_weight_decay_shrinks_weights_by_learning_rate_times_decay():
    """AdamW: with the same gradients, weights with weight_decay=wd end lr * wd * w below those without."""
    variables = [tf.Variable(np.linspace(-2.0, 2.0, 12).reshape(3, 4).astype("float32")) for _ in range(2)]
    gradients = tf.constant(np.random.default_rng(0).normal(size=(3, 4)).astype("float32"))
    initial = variables[0].numpy()
    rates = []
    for variable, decay in zip(variables, (0.0, 0.01)):
        optimizer = make_optimizer(update_hparams(weight_decay=decay))
        optimizer.build([variable])
        rates.append(float(optimizer.learning_rate))  # the rate of the first update
        optimizer.apply_gradients([(gradients, variable)])
    assert rates[0] == rates[1] > 0
    np.testing.assert_allclose(variables[0].numpy() - variables[1].numpy(), rates[1] * 0.01 * initial, rtol=1e-3, atol=1e-7)  # float32 steps of ~1e-7 near 1


def test_fused_adam_equals_keras_adam():
    """One kernel per variable, the same update as keras.optimizers.Adam (and AdamW) over
    several steps, gradients from 1e-6 to 1 in size."""
    import keras

    from t2t_keras.optimization.adam import FusedAdam

    rng = np.random.default_rng(0)
    start = rng.normal(size=(16, 8)).astype(np.float32)
    gradients = [rng.normal(size=(16, 8)).astype(np.float32) * 10 ** rng.uniform(-6, 0) for _ in range(5)]
    for weight_decay in (None, 0.01):
        results = []
        for optimizer_class in (keras.optimizers.Adam, FusedAdam):
            variable = keras.Variable(start)
            optimizer = optimizer_class(learning_rate=1e-2, beta_1=0.9, beta_2=0.98, epsilon=1e-9, weight_decay=weight_decay)
            for gradient in gradients:
                optimizer.apply_gradients([(tf.constant(gradient), variable)])
            results.append(variable.numpy())
        assert np.abs(results[0] - start).max() > 1e-2
        np.testing.assert_allclose(results[1], results[0], atol=1e-6)

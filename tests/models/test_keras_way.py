"""The Transformer as a Keras user meets it: built from a set's name, compile() + fit() on a
problem's batches, .keras files."""

import logging
import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.checkpoints import RunDir, restore_model
from t2t_keras.errors import UsageError
from t2t_keras.models import Transformer
from t2t_keras.training import trainer
from tests.testing import seed_generators

FIT_STEPS = 8


def test_built_from_a_set_name_with_overrides():
    model = Transformer("transformer_demo", vocab_size=300, num_hidden_layers=1, hidden_size=32, filter_size=64)
    expected = registry.hparams("transformer_demo", "num_hidden_layers=1,hidden_size=32,filter_size=64")
    assert model.hparams == expected
    assert model.built and model.count_params() == Transformer.from_hparams(expected, 300).count_params()
    lines = []
    model.summary(print_fn=lambda line, **_: lines.append(line))
    assert f"Total params: {model.count_params():,}" in "\n".join(lines)


def test_constructor_refuses_what_it_cannot_build():
    with pytest.raises(UsageError, match="unknown hparams set"):
        Transformer("transformer_nosuch", vocab_size=300)
    with pytest.raises(UsageError, match="hidden_size"):
        Transformer("transformer_tiny", vocab_size=300, hidden_size="wide")
    with pytest.raises(TypeError, match="vocab_size"):
        Transformer("transformer_tiny")


def test_compile_asks_for_the_steps_a_cooldown_needs():
    model = Transformer("transformer_demo", vocab_size=300, num_hidden_layers=1)
    with pytest.raises(ValueError, match=r"compile\(train_steps=N\)"):
        model.compile()
    model.compile(train_steps=1500)
    schedule = model.optimizer.get_config()["learning_rate"]["config"]
    assert (schedule["train_steps"], schedule["cooldown_steps"], schedule["warmup_steps"]) == (1500, 750, 400)


def _trainer_losses(caplog, data_dir, output_dir, hparams):
    """Per-step losses (4 decimals, as logged) and the model of a trainer run of FIT_STEPS steps."""
    seed_generators("fit_and_trainer")
    settings = trainer.RunSettings(
        output_dir=str(output_dir), data_dir=data_dir, train_steps=FIT_STEPS, save_checkpoints_steps=FIT_STEPS,
        log_steps=1, evaluate=False, seed=1, kernel_choices={"loss_layout": "rows", "layer_norm": "graph", "bias_relu": "graph"},
    )
    with caplog.at_level(logging.INFO, logger="absl"):  # whatever level an earlier test left absl's logger at
        trainer.train(registry.problem("translate_ende_multi30k"), hparams, settings, tf.distribute.OneDeviceStrategy("/cpu:0"))
    losses = [float(m.group(1)) for m in re.finditer(r"step \d+/\d+  loss ([\d.]+)", caplog.text)]
    return losses, restore_model(RunDir(str(output_dir)))[0]


def test_fit_trains_as_the_trainer_does(caplog, multi30k_data_dir, tmp_path):
    """The demo model, FIT_STEPS updates from the same initial weights, dropout seeds and
    batches: Keras' fit runs the trainer's step (the fused output-layer loss, the same kernels
    forced on both), so the losses agree to the 4 decimals the trainer logs and the weights to
    float rounding (a relative 1e-5 of each weight's change)."""
    # the demo's schedule compressed into FIT_STEPS: a warmup, then a cooldown over the last half
    hparams = registry.hparams("transformer_demo", f"learning_rate_warmup_steps=20,learning_rate_cooldown_steps={FIT_STEPS // 2}")
    trainer_losses, trained = _trainer_losses(caplog, multi30k_data_dir, tmp_path / "trainer", hparams)
    assert len(trainer_losses) == FIT_STEPS

    seed_generators("fit_and_trainer")
    problem = registry.problem("translate_ende_multi30k")
    vocab_size = problem.load_vocabularies(multi30k_data_dir).source.size
    model = Transformer(hparams, vocab_size=vocab_size)
    initial = [w.numpy() for w in model.weights]
    model.compile(train_steps=FIT_STEPS, kernel_choices="loss_layout=rows,layer_norm=graph,bias_relu=graph")
    batches = problem.dataset("train", multi30k_data_dir, hparams.tokens_per_batch, training=True,
                              max_length=hparams.max_length, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of Keras' warnings about the dataset (shuffle=True, data running out)
        history = model.fit(batches, epochs=FIT_STEPS, steps_per_epoch=1, verbose=0)  # an epoch per step: each step's loss
    np.testing.assert_allclose(history.history["loss"], trainer_losses, atol=1e-4)
    assert trainer_losses[-1] < trainer_losses[0] - 0.5  # it learns
    assert {name: model.kernel_choices[name] for name in ("loss_layout", "layer_norm", "bias_relu")} == {
        "loss_layout": "rows", "layer_norm": "graph", "bias_relu": "graph"}
    for start, fitted, reference in zip(initial, model.weights, trained.weights):
        change = reference.numpy() - start
        np.testing.assert_allclose(fitted.numpy() - start, change, atol=1e-5 * np.abs(change).max() + 1e-7)


def test_a_metric_on_the_logits_takes_the_logits_path_with_the_same_loss(multi30k_data_dir):
    """Without metrics, fit and evaluate never compute the [tokens, vocabulary] logits (the
    fused loss); a compiled metric reads them, and the loss from them is the same."""
    problem = registry.problem("translate_ende_multi30k")
    vocab_size = problem.load_vocabularies(multi30k_data_dir).source.size
    model = Transformer("transformer_demo", vocab_size=vocab_size, num_hidden_layers=1, hidden_size=64, filter_size=128)
    batch = next(iter(problem.dataset("dev", multi30k_data_dir, 1024, training=False)))
    dev = tf.data.Dataset.from_tensors(batch)
    logits = model._logits

    def refused(*args, **kwargs):
        raise AssertionError("the fused path computed the logits")

    model._logits = refused
    model.compile(train_steps=4, kernel_choices="loss_layout=rows,layer_norm=graph,bias_relu=graph")
    model.fit(dev.repeat(), epochs=1, steps_per_epoch=2, verbose=0)
    fused = model.evaluate(dev, return_dict=True, verbose=0)
    model._logits = logits
    model.compile(train_steps=4, weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    with_metric = model.evaluate(dev, return_dict=True, verbose=0)
    assert set(fused) == {"loss"} and set(with_metric) == {"loss", "accuracy"}
    np.testing.assert_allclose(fused["loss"], with_metric["loss"], rtol=1e-5)
    assert 0.0 <= with_metric["accuracy"] < 0.5


def test_keras_file_round_trips_with_identical_translations(trained_output_dir, tmp_path):
    from t2t_keras import Translator

    run_dir = RunDir(trained_output_dir)
    model = restore_model(run_dir)[0]
    model.compile()
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, Transformer) and loaded.hparams == model.hparams
    assert isinstance(loaded.optimizer, type(model.optimizer)) and loaded.loss.label_smoothing == model.hparams.label_smoothing
    vocabularies, problem = run_dir.vocabularies(), run_dir.problem()
    sentences = ["A dog runs in the snow.", "Two men are playing football on a green field.", ""]
    before = Translator.from_model(model, vocabularies, problem, beam_size=3).translate(sentences, n_best=3)
    after = Translator.from_model(loaded, vocabularies, problem, beam_size=3).translate(sentences, n_best=3)
    assert [[h.text for h in line] for line in after] == [[h.text for h in line] for line in before]
    np.testing.assert_allclose([[h.score for h in line] for line in after], [[h.score for h in line] for line in before],
                               rtol=1e-6)  # each Translator times its own output product's orientation
    for saved, restored in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(restored.numpy(), saved.numpy())


def test_fit_on_two_replicas_steps_as_on_one(multi30k_data_dir):
    """The fused step counts all replicas' tokens together, as the trainer does: the same batch
    on 2 replicas (each half of it) gives the 1-replica losses and weights, to float rounding."""
    problem = registry.problem("translate_ende_multi30k")
    vocab_size = problem.load_vocabularies(multi30k_data_dir).source.size
    batches = tf.data.Dataset.from_tensors(next(iter(problem.dataset("dev", multi30k_data_dir, 2048, training=False)))).repeat()
    runs = []
    # Reduced through one device, not by collective ops: a later strategy's collectives in this
    # process (test_train_step.py's) would reuse this one's instance keys with other shapes.
    two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"), two):
        with strategy.scope():
            model = Transformer("transformer_demo", vocab_size=vocab_size, num_hidden_layers=1, hidden_size=64, filter_size=128,
                                layer_prepostprocess_dropout=0.0, attention_dropout=0.0, relu_dropout=0.0)
            model.compile(train_steps=3, kernel_choices="loss_layout=rows,layer_norm=graph,bias_relu=graph")
        for weight, start in zip(model.weights, runs[0][1] if runs else [w.numpy() for w in model.weights]):
            weight.assign(start)
        start = [w.numpy() for w in model.weights]
        history = model.fit(batches, epochs=3, steps_per_epoch=1, verbose=0)
        runs.append((history.history["loss"], start, [w.numpy() for w in model.weights]))
    (one_losses, _, one), (two_losses, _, two) = runs
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-6)
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, atol=1e-6)

"""The evaluator's source-dependence metric and the problem's own dev score."""

import random

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry, system
from t2t_keras.data import datagen
from t2t_keras.models.transformer import Encoded
from t2t_keras.problem import Problem, VocabSpec
from t2t_keras.training import trainer
from t2t_keras.training.evaluator import Evaluator
from tests.testing import seed_generators


class CopyProblem(Problem):
    """Sequences of letters to be copied: solvable only by reading the source."""

    name = "copy_letters_test"
    vocab_spec = VocabSpec(size=275)
    num_shards = {"train": 1, "dev": 1}

    def text_pairs(self, split, tmp_dir, stats):
        rng = random.Random({"train": 0, "dev": 1}[split])
        for _ in range({"train": 3000, "dev": 100}[split]):
            text = " ".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9)))
            yield text, text


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """(problem, data_dir, model, hparams) after 300 updates on the copy task."""
    seed_generators("copy_run")  # the same model whichever test asks for it first
    problem = CopyProblem()
    data_dir = str(tmp_path_factory.mktemp("copy_data"))
    datagen.generate(problem, data_dir, None, progress=False)
    hparams = registry.hparams(
        "transformer_tiny",
        "hidden_size=64,filter_size=128,num_heads=4,tokens_per_batch=1024,max_length=64,"
        "learning_rate_warmup_steps=30,learning_rate=0.2,layer_prepostprocess_dropout=0.0",
    )
    settings = trainer.RunSettings(
        output_dir=str(tmp_path_factory.mktemp("copy_run")), data_dir=data_dir, train_steps=300, seed=1,
        save_checkpoints_steps=300, log_steps=300, evaluate=False,
    )
    trainer.train(problem, hparams, settings, tf.distribute.OneDeviceStrategy("/cpu:0"))
    from t2t_keras.checkpoints import RunDir, restore_model

    model, _ = restore_model(RunDir(settings.output_dir))
    return problem, data_dir, model, hparams


def _evaluator(copy_run, score_sentences=0):
    problem, data_dir, model, hparams = copy_run
    return Evaluator(problem, data_dir, model, problem.load_vocabularies(data_dir), hparams,
                     tf.distribute.OneDeviceStrategy("/cpu:0"), score_sentences=score_sentences)


def test_source_gap_is_large_for_a_model_that_copies(copy_run):
    metrics = _evaluator(copy_run, score_sentences=20).evaluate()
    assert metrics["accuracy"] > 0.8, metrics
    assert metrics["source_gap"] > 1.0, metrics  # nats per token the true source is worth
    np.testing.assert_allclose(metrics["source_gap"], metrics["shuffled_source_nll"] - metrics["nll"], rtol=1e-6)
    assert metrics["bleu"] > 50, metrics  # the problem's own score of decoded dev sentences


def test_source_gap_is_zero_when_the_encoder_output_is_zeroed(copy_run, monkeypatch):
    _, _, model, _ = copy_run
    real_encode = type(model).encode

    def zeroed_encode(self, inputs, training=None):
        encoded = real_encode(self, inputs, training=training)
        return Encoded(tf.zeros_like(encoded.outputs), encoded.mask)

    monkeypatch.setattr(type(model), "encode", zeroed_encode)
    metrics = _evaluator(copy_run).evaluate()
    assert abs(metrics["source_gap"]) < 1e-4, metrics
    assert metrics["nll"] > 1.0, metrics  # and, blind to the source, the model no longer copies


def test_bf16_dev_score_decodes_a_bfloat16_copy_of_the_current_weights(copy_run, monkeypatch):
    monkeypatch.setattr(system, "bfloat16_units", lambda: "AVX512_BF16")
    problem, data_dir, model, hparams = copy_run
    evaluator = Evaluator(problem, data_dir, model, problem.load_vocabularies(data_dir), hparams,
                          tf.distribute.OneDeviceStrategy("/cpu:0"), score_sentences=20,
                          decode_hparams=problem.decode_settings("precision=bf16"))
    assert {weight.dtype for weight in evaluator.translator.model.weights} == {"bfloat16"}
    for weight in evaluator.translator.model.weights:  # stale weights: each evaluation copies the model's in
        weight.assign(tf.zeros(weight.shape, weight.dtype))
    assert evaluator.score().value > 50

"""The registered sets against the paper's Table 3 (sizes, parameter counts)."""

import dataclasses
import gc

import pytest

from t2t_keras import registry
from t2t_keras.hparams_lib import HParams, field_names
from t2t_keras.models import Transformer

EN_DE_VOCAB = 37000

# Set name -> (the Table 3 cells that differ from base, the params column in millions;
# a blank cell in the paper equals base, 65M).
TABLE3 = {
    "transformer_base": ({}, 65),
    "transformer_base_h1": (dict(num_heads=1, key_depth=512, value_depth=512), 65),
    "transformer_base_h4": (dict(num_heads=4, key_depth=128, value_depth=128), 65),
    "transformer_base_h16": (dict(num_heads=16, key_depth=32, value_depth=32), 65),
    "transformer_base_h32": (dict(num_heads=32, key_depth=16, value_depth=16), 65),
    "transformer_base_dk16": (dict(key_depth=16), 58),
    "transformer_base_dk32": (dict(key_depth=32), 60),
    "transformer_n2": (dict(num_hidden_layers=2), 36),
    "transformer_n4": (dict(num_hidden_layers=4), 50),
    "transformer_n8": (dict(num_hidden_layers=8), 80),
    "transformer_base_d256": (dict(hidden_size=256, key_depth=32, value_depth=32), 28),
    "transformer_base_d1024": (dict(hidden_size=1024, key_depth=128, value_depth=128), 168),
    "transformer_base_ff1024": (dict(filter_size=1024), 53),
    "transformer_base_ff4096": (dict(filter_size=4096), 90),
    "transformer_base_drop0": (dict(layer_prepostprocess_dropout=0.0), 65),
    "transformer_base_drop02": (dict(layer_prepostprocess_dropout=0.2), 65),
    "transformer_base_ls0": (dict(label_smoothing=0.0), 65),
    "transformer_base_ls02": (dict(label_smoothing=0.2), 65),
    "transformer_base_learned_pos": (dict(positional_encoding="learned"), 65),
    "transformer_big": (
        dict(hidden_size=1024, filter_size=4096, num_heads=16, key_depth=64, value_depth=64, layer_prepostprocess_dropout=0.3),
        213,
    ),
}

BASE_CELLS = dict(
    num_hidden_layers=6, hidden_size=512, filter_size=2048, num_heads=8, key_depth=64, value_depth=64,
    layer_prepostprocess_dropout=0.1, label_smoothing=0.1, positional_encoding="sinusoid",
)


def _cells(hp: HParams) -> dict:
    return {name: getattr(hp, name) for name in BASE_CELLS}


@pytest.mark.parametrize("name", TABLE3)
def test_table3_row_values(name):
    changes, _ = TABLE3[name]
    assert _cells(registry.hparams(name)) == {**BASE_CELLS, **changes}


# Architecture (the "model" fields, which fix every weight's shape) -> millions of parameters:
# the rows that change only dropout or label smoothing build no model of their own (~4 s each).
_MILLIONS = {}


def _millions_of_parameters(hp: HParams) -> float:
    architecture = tuple(getattr(hp, name) for name in field_names("model"))
    if architecture not in _MILLIONS:
        model = Transformer.from_hparams(hp, EN_DE_VOCAB)
        _MILLIONS[architecture] = model.count_params() / 1e6
        del model
        gc.collect()
    return _MILLIONS[architecture]


@pytest.mark.parametrize("name", TABLE3)
def test_table3_parameter_count_within_7_percent(name, record_property):
    _, paper_millions = TABLE3[name]
    ours = _millions_of_parameters(registry.hparams(name))
    record_property("params_millions", round(ours, 1))
    assert abs(ours - paper_millions) / paper_millions <= 0.07, f"{name}: {ours:.1f}M vs paper {paper_millions}M"


def test_base_and_big_recipe_is_the_papers():
    for name in ("transformer_base", "transformer_big"):
        hp = registry.hparams(name)
        assert (hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon) == (0.9, 0.98, 1e-9)
        assert (hp.learning_rate, hp.learning_rate_warmup_steps) == (1.0, 4000)
        assert hp.norm_type == "post" and hp.shared_embedding_and_softmax_weights
        assert hp.label_smoothing == 0.1
        assert (hp.attention_dropout, hp.relu_dropout) == (0.0, 0.0)


def test_big_enfr_only_lowers_dropout():
    big, enfr = registry.hparams("transformer_big"), registry.hparams("transformer_big_enfr")
    assert big.differences(enfr) == ["layer_prepostprocess_dropout: 0.3 -> 0.1"]


def test_prenorm_variant():
    hp = registry.hparams("transformer_prenorm")
    assert hp.norm_type == "pre"
    assert registry.hparams("transformer_base").differences(hp, group="model") == ["norm_type: 'post' -> 'pre'"]


def test_tiny_is_small():
    model = Transformer.from_hparams(registry.hparams("transformer_tiny"), 8000)
    assert model.count_params() < 3_000_000


def test_every_registered_set_is_valid_and_distinct():
    sets = {name: registry.hparams(name) for name in registry.list_hparams()}
    assert {"transformer_base", "transformer_big", "transformer_big_enfr", "transformer_tiny", "transformer_prenorm"} <= set(sets)
    values = [dataclasses.astuple(hp) for hp in sets.values()]
    assert len(set(values)) == len(values), "two names register the same hparams"

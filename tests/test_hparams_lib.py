import dataclasses

import pytest

from t2t_keras import registry
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import MODEL, TRAINING, HParams, apply_overrides, field_names


def test_overrides_parse_by_field_type():
    hp = apply_overrides(
        HParams(),
        "num_hidden_layers=4, label_smoothing=0.2,shared_embedding_and_softmax_weights=false,norm_type=pre,model=transformer",
    )
    assert hp.num_hidden_layers == 4 and isinstance(hp.num_hidden_layers, int)
    assert hp.label_smoothing == 0.2
    assert hp.shared_embedding_and_softmax_weights is False
    assert hp.norm_type == "pre"
    assert apply_overrides(HParams(), "") == HParams()


def test_registry_applies_overrides():
    hp = registry.hparams("transformer_big", "num_hidden_layers=4,label_smoothing=0.2")
    assert (hp.num_hidden_layers, hp.label_smoothing, hp.hidden_size) == (4, 0.2, 1024)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ("num_hiden_layers=4", "unknown hparam 'num_hiden_layers'; did you mean 'num_hidden_layers'? valid: model, num_hidden_layers,"),
        ("num_hidden_layers=four", "num_hidden_layers='four' is not an int"),
        ("num_hidden_layers=4.5", "is not an int"),
        ("label_smoothing=high", "label_smoothing='high' is not a float"),
        ("shared_embedding_and_softmax_weights=maybe", "is not a bool; use true or false"),
        ("norm_type=mid", "norm_type='mid' is not one of post, pre"),
        ("num_heads", "'num_heads' is not name=value"),
        ("__import__('os')=1", "unknown hparam"),
    ],
)
def test_bad_overrides_are_one_line_errors(overrides, message):
    with pytest.raises(UsageError) as error:
        apply_overrides(HParams(), overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ("num_heads=7", "hidden_size=512 is not divisible by num_heads=7"),
        ("label_smoothing=1.5", "label_smoothing=1.5 must be in [0, 1)"),
        ("subword_sampling=1.0", "subword_sampling=1.0 must be in [0, 1)"),
        ("layer_prepostprocess_dropout_early=1.0", "layer_prepostprocess_dropout_early=1.0 must be in [0, 1)"),
        ("num_hidden_layers=0", "num_hidden_layers must be positive"),
    ],
)
def test_inconsistent_values_are_rejected(overrides, message):
    with pytest.raises(UsageError, match=r"invalid hparams: .*" + message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        registry.hparams("transformer_base", overrides)


def test_explicit_depths_allow_indivisible_heads():
    hp = registry.hparams("transformer_base", "num_heads=7,attention_key_depth=64,attention_value_depth=64")
    assert (hp.key_depth, hp.value_depth) == (64, 64)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        HParams().hidden_size = 3


def test_json_round_trip():
    hp = registry.hparams("transformer_big", "norm_type=pre,learning_rate=2")
    assert HParams.from_json(hp.to_json()) == hp


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"hidden_sise": 3}', "hparams.json: unknown hparam 'hidden_sise'; did you mean 'hidden_size'?"),
        ('{"hidden_size": "big"}', "hparams.json: hidden_size='big' should be of type int"),
        ('{"hidden_size": true}', "should be of type int"),
        ("{not json", "hparams.json: not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_json_is_a_usage_error(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("?", r"\?")):
        HParams.from_json(text)


def test_groups_separate_architecture_from_recipe():
    assert {"hidden_size", "num_heads", "norm_type", "positional_encoding"} <= set(field_names(MODEL))
    assert {"label_smoothing", "learning_rate_warmup_steps", "adam_beta2", "tokens_per_batch", "weight_decay"} <= set(field_names(TRAINING))
    assert set(field_names()) == set(field_names(MODEL)) | set(field_names(TRAINING))
    base, big = registry.hparams("transformer_base"), registry.hparams("transformer_big")
    assert base.differences(big, group=TRAINING) == ["layer_prepostprocess_dropout: 0.1 -> 0.3"]

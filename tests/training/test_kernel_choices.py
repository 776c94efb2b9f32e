"""Kernel alternatives chosen per machine: forced, kept or timed, once per start, recorded."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.errors import UsageError
from t2t_keras.kernels import native
from t2t_keras.kernels.output_loss import LAYOUTS
from t2t_keras.layers import Dense, LayerNorm
from t2t_keras.training import kernel_choices
from tests.testing import build_train_step, cycle, global_batch, update_hparams


def test_parse_accepts_the_choices_and_names_the_flag_otherwise():
    assert kernel_choices.parse("") == {}
    assert kernel_choices.parse("loss_layout=columns") == {"loss_layout": "columns"}
    for bad in ("loss_layout=diagonal", "layout=columns", "loss_layout"):
        with pytest.raises(UsageError, match=r"^--kernel_choices: .* is not a choice; the choices are loss_products=variable\|compute; loss_layout=rows\|rows_copy\|columns\|rows_in_chunks\|native_rows\|native_rows_in_chunks; layer_norm=graph\|native; bias_relu=graph\|native\.$"):
            kernel_choices.parse(bad)


class _CountingMeasure:
    """The loss layouts' timings given, the native kernels faster."""

    NATIVE = {"graph": 2.0, "native": 1.0}

    def __init__(self, timings):
        self.timings, self.calls = timings, []

    def __call__(self, name, model, hparams):
        self.calls.append(name)
        return dict(self.NATIVE if name in kernel_choices.NATIVE else self.timings)


def _model(**changes):
    model, _ = build_train_step(tf.distribute.OneDeviceStrategy("/cpu:0"), update_hparams(**changes))
    return model


def test_the_fastest_is_chosen_set_on_the_model_and_recorded():
    """In float32 the products' dtype has one value (not timed); the layout is timed."""
    model, measure = _model(), _CountingMeasure({"rows": 3.0, "rows_copy": 2.0, "columns": 2.5})
    record = kernel_choices.choose(model, update_hparams(), {}, measure=measure)
    assert measure.calls == ["loss_layout", "layer_norm", "bias_relu"]
    assert record == {"loss_products": "variable", "loss_layout": "rows_copy", "layer_norm": "native", "bias_relu": "native",
                      "measured_ms": {"loss_layout": measure.timings, "layer_norm": measure.NATIVE, "bias_relu": measure.NATIVE}}
    assert model.softmax_projection.loss_layout == "rows_copy"
    assert {layer.implementation for layer in model._flatten_layers() if isinstance(layer, (LayerNorm, Dense))} == {"native"}


def test_under_mixed_precision_the_products_dtype_is_timed_first():
    model = _model(mixed_precision="mixed_bfloat16")
    measure = lambda name, model, hparams: {"loss_products": {"variable": 5.0, "compute": 2.0},
                                            "loss_layout": {"rows": 2.0, "rows_in_chunks": 1.0},
                                            "layer_norm": {"graph": 1.0, "native": 2.0},
                                            "bias_relu": {"graph": 1.0, "native": 2.0}}[name]
    record = kernel_choices.choose(model, update_hparams(), {}, measure=measure)
    assert (record["loss_products"], record["loss_layout"]) == ("compute", "rows_in_chunks")
    assert model.softmax_projection.products_dtype() == "bfloat16"
    model.softmax_projection.loss_products = "variable"
    assert model.softmax_projection.products_dtype() == "float32"


def test_forced_and_kept_choices_are_not_measured():
    model, measure = _model(), _CountingMeasure({"rows": 1.0, "rows_copy": 2.0, "columns": 3.0})
    forced = {"loss_layout": "columns", "layer_norm": "graph", "bias_relu": "graph"}
    record = kernel_choices.choose(model, update_hparams(), forced, measure=measure)
    assert measure.calls == [] and record == {"loss_products": "variable", **forced}
    assert model.softmax_projection.loss_layout == "columns"
    kept = {"loss_products": "variable", "loss_layout": "rows_copy", "layer_norm": "native", "bias_relu": "native",
            "measured_ms": {"loss_layout": {"rows": 9.0, "rows_copy": 1.0, "columns": 5.0}}}
    assert kernel_choices.choose(model, update_hparams(), {}, kept, measure=measure) == kept
    assert measure.calls == [] and model.softmax_projection.loss_layout == "rows_copy"
    # forced wins over kept (comparing a resumed run's speed in another layout)
    assert kernel_choices.choose(model, update_hparams(), {"loss_layout": "rows"}, kept, measure=measure)["loss_layout"] == "rows"


def test_a_run_started_before_a_choice_existed_keeps_what_it_computed():
    """A mixed-precision run whose run.json predates loss_products resumes with float32 products, untimed."""
    model, measure = _model(mixed_precision="mixed_bfloat16"), _CountingMeasure({})
    kept = {"loss_layout": "rows", "measured_ms": {"loss_layout": {"rows": 1.0}}}
    record = kernel_choices.choose(model, update_hparams(), {}, kept, measure=measure)
    assert measure.calls == [] and record["loss_products"] == "variable" and record["loss_layout"] == "rows"
    assert record["layer_norm"] == record["bias_relu"] == "graph"


def test_the_native_kernels_are_offered_only_where_they_were_built(monkeypatch, caplog):
    """Where the native kernels could not be built: not timed, the trainer says why, refused
    when forced (naming why), and a run that chose it on another machine resumes with the graph kernels."""
    monkeypatch.setattr(native, "library", lambda: None)
    monkeypatch.setattr(native, "unavailable_reason", lambda: "no C++ compiler ('g++' is not on PATH; set CXX to one)")
    model, measure = _model(), _CountingMeasure({"rows": 1.0, "rows_copy": 2.0, "columns": 3.0})
    assert kernel_choices.choose(model, update_hparams(), {}, measure=measure)["layer_norm"] == "graph"
    assert measure.calls == ["loss_layout"]
    assert any("native kernels are not available here (no C++ compiler" in record.getMessage() for record in caplog.records)
    with pytest.raises(UsageError, match=r"^--kernel_choices: layer_norm=native is not available here: no C\+\+ compiler"):
        kernel_choices.choose(model, update_hparams(), {"layer_norm": "native"}, measure=measure)
    kept = {"loss_products": "variable", "loss_layout": "rows", "layer_norm": "native"}
    assert kernel_choices.choose(model, update_hparams(), {}, kept, measure=measure)["layer_norm"] == "graph"
    assert {layer.implementation for layer in model._flatten_layers() if isinstance(layer, (LayerNorm, Dense))} == {"graph"}
    # the native loss layouts: not among the options, refused when forced, a kept one falls back
    assert kernel_choices._options("loss_layout", model) == ("rows", "rows_copy", "columns", "rows_in_chunks")
    with pytest.raises(UsageError, match=r"^--kernel_choices: loss_layout=native_rows is not available here: no C\+\+ compiler"):
        kernel_choices.choose(model, update_hparams(), {"loss_layout": "native_rows"}, measure=measure)
    kept = {"loss_products": "variable", "loss_layout": "native_rows_in_chunks"}
    assert kernel_choices.choose(model, update_hparams(), {}, kept, measure=measure)["loss_layout"] == "rows"


def test_a_forced_layout_gives_the_same_loss_trajectory():
    """Five updates of the same model on the same batches in each layout: the losses and the
    final weights agree to float rounding (the choice changes speed, not training)."""
    hparams = update_hparams()
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    initial, runs = None, {}
    for layout in LAYOUTS:
        model, step = build_train_step(strategy, hparams, initial)
        initial = initial or model.get_weights()
        kernel_choices.apply(model, {"loss_layout": layout})
        iterator = iter(strategy.distribute_datasets_from_function(lambda context: cycle(global_batch())))
        runs[layout] = ([float(step.update(iterator)[0]) for _ in range(5)], model.get_weights())
    losses, weights = runs["rows"]
    assert losses[-1] < losses[0]  # it trains
    for layout in LAYOUTS[1:]:
        np.testing.assert_allclose(runs[layout][0], losses, rtol=1e-5, err_msg=layout)
        for got, want in zip(runs[layout][1], weights):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-4, err_msg=layout)


def test_bfloat16_products_train_as_float32_ones_to_bfloat16_rounding():
    """Mixed bf16, five updates from the same weights on the same batches with the output
    layer's products in float32 and in bfloat16: the losses agree to ~1% (the logits rounded to
    bfloat16, as every other layer's outputs are) and both fall."""
    hparams = update_hparams(mixed_precision="mixed_bfloat16")
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    initial, losses = None, {}
    for products in ("variable", "compute"):
        model, step = build_train_step(strategy, hparams, initial)
        initial = initial or model.get_weights()
        kernel_choices.apply(model, {"loss_products": products, "loss_layout": "rows_in_chunks"})
        iterator = iter(strategy.distribute_datasets_from_function(lambda context: cycle(global_batch())))
        losses[products] = [float(step.update(iterator)[0]) for _ in range(5)]
    assert losses["compute"][-1] < losses["compute"][0] and losses["variable"][-1] < losses["variable"][0]
    np.testing.assert_allclose(losses["compute"], losses["variable"], rtol=1e-2)
    assert losses["compute"] != losses["variable"]  # the products did run in another dtype


@pytest.mark.parametrize("policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 1e-2)])
def test_the_native_kernels_train_as_the_graph_ones(policy, tolerance):
    """Five updates from the same weights on the same batches with the native layer norm and
    bias + ReLU and with the graph's: the losses agree to float rounding (bfloat16's, under
    mixed precision) and fall."""
    assert native.library() is not None, native.unavailable_reason()
    hparams = update_hparams(mixed_precision=policy)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    initial, losses = None, {}
    for implementation in ("graph", "native"):
        model, step = build_train_step(strategy, hparams, initial)
        initial = initial or model.get_weights()
        kernel_choices.apply(model, {"layer_norm": implementation, "bias_relu": implementation, "loss_layout": "rows"})
        iterator = iter(strategy.distribute_datasets_from_function(lambda context: cycle(global_batch())))
        losses[implementation] = [float(step.update(iterator)[0]) for _ in range(5)]
    assert losses["native"][-1] < losses["native"][0]
    np.testing.assert_allclose(losses["native"], losses["graph"], rtol=tolerance)

"""Kernel alternatives chosen per machine: forced, kept or timed, once per start, recorded."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras.errors import UsageError
from t2t_keras.kernels.output_loss import LAYOUTS
from t2t_keras.training import kernel_choices
from tests.testing import build_train_step, cycle, global_batch, update_hparams


def test_parse_accepts_the_choices_and_names_the_flag_otherwise():
    assert kernel_choices.parse("") == {}
    assert kernel_choices.parse("loss_layout=columns") == {"loss_layout": "columns"}
    for bad in ("loss_layout=diagonal", "layout=columns", "loss_layout"):
        with pytest.raises(UsageError, match=r"^--kernel_choices: .* is not a choice; the choices are loss_layout=rows\|rows_copy\|columns\.$"):
            kernel_choices.parse(bad)


class _CountingMeasure:
    def __init__(self, timings):
        self.timings, self.calls = timings, []

    def __call__(self, name, model, hparams):
        self.calls.append(name)
        return dict(self.timings)


def _model():
    model, _ = build_train_step(tf.distribute.OneDeviceStrategy("/cpu:0"), update_hparams())
    return model


def test_the_fastest_is_chosen_set_on_the_model_and_recorded():
    model, measure = _model(), _CountingMeasure({"rows": 3.0, "rows_copy": 2.0, "columns": 2.5})
    record = kernel_choices.choose(model, update_hparams(), {}, measure=measure)
    assert measure.calls == ["loss_layout"]
    assert record == {"loss_layout": "rows_copy", "measured_ms": {"loss_layout": measure.timings}}
    assert model.softmax_projection.loss_layout == "rows_copy"


def test_forced_and_kept_choices_are_not_measured():
    model, measure = _model(), _CountingMeasure({"rows": 1.0, "rows_copy": 2.0, "columns": 3.0})
    record = kernel_choices.choose(model, update_hparams(), {"loss_layout": "columns"}, measure=measure)
    assert measure.calls == [] and record == {"loss_layout": "columns"} and model.softmax_projection.loss_layout == "columns"
    kept = {"loss_layout": "rows_copy", "measured_ms": {"loss_layout": {"rows": 9.0, "rows_copy": 1.0, "columns": 5.0}}}
    assert kernel_choices.choose(model, update_hparams(), {}, kept, measure=measure) == kept
    assert measure.calls == [] and model.softmax_projection.loss_layout == "rows_copy"
    # forced wins over kept (comparing a resumed run's speed in another layout)
    assert kernel_choices.choose(model, update_hparams(), {"loss_layout": "rows"}, kept, measure=measure)["loss_layout"] == "rows"


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

import dataclasses
import json

import keras
import numpy as np
import pytest

from t2t_keras import registry
from t2t_keras.optimization.schedules import RsqrtWarmupSchedule
from t2t_keras.optimization.recipe import make_optimizer


def _paper(step, d_model=512, warmup=4000):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("step", [1, 4000, 100000])
def test_equals_the_papers_formula(step):
    schedule = RsqrtWarmupSchedule(hidden_size=512, warmup_steps=4000)
    # Keras passes the number of updates already applied: the paper's step minus one.
    np.testing.assert_allclose(float(schedule(step - 1)), _paper(step), rtol=1e-6)


def test_peak_at_warmup_and_multiplier():
    schedule = RsqrtWarmupSchedule(hidden_size=1024, warmup_steps=4000, multiplier=2.0)
    rates = [float(schedule(s - 1)) for s in (3999, 4000, 4001)]
    assert rates[1] == max(rates)
    np.testing.assert_allclose(rates[1], 2.0 * _paper(4000, d_model=1024), rtol=1e-6)


def test_drives_a_keras_optimizer_and_serializes():
    schedule = RsqrtWarmupSchedule(hidden_size=512)
    optimizer = keras.optimizers.Adam(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    variable = keras.Variable(1.0)
    optimizer.apply_gradients([(keras.ops.convert_to_tensor(1.0), variable)])
    np.testing.assert_allclose(float(optimizer.learning_rate), _paper(2), rtol=1e-6)
    restored = RsqrtWarmupSchedule.from_config(json.loads(json.dumps(schedule.get_config())))
    assert float(restored(10)) == float(schedule(10))


def test_cooldown_falls_linearly_to_zero_at_the_last_step():
    hparams = dataclasses.replace(registry.hparams("transformer_base"), learning_rate_cooldown_steps=100)
    optimizer = make_optimizer(hparams, train_steps=1000)
    for step, factor in ((899, 1.0), (900, 1.0), (901, 1.0), (950, 0.51), (1000, 0.01), (1001, 0.0)):
        optimizer.iterations.assign(step - 1)  # the update about to be made is `step`
        np.testing.assert_allclose(float(optimizer.learning_rate), factor * _paper(step), rtol=1e-5, atol=1e-12, err_msg=step)
    with pytest.raises(ValueError, match="cooldown needs the number of training steps"):
        make_optimizer(hparams)
    paper = make_optimizer(registry.hparams("transformer_base"), train_steps=1000)
    paper.iterations.assign(999)
    np.testing.assert_allclose(float(paper.learning_rate), _paper(1000), rtol=1e-6)

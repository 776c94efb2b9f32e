"""The paper's optimizer (section 5.3) for an HParams: what the trainer and `Transformer.compile` both use."""

from __future__ import annotations

import dataclasses

import keras

from t2t_keras.hparams_lib import HParams
from t2t_keras.optimization.adam import FusedAdam
from t2t_keras.optimization.schedules import RsqrtWarmupSchedule


def make_optimizer(hparams: HParams, train_steps: int = 0) -> keras.optimizers.Optimizer:
    """Adam with the paper's betas, epsilon and learning-rate schedule (loss scaling for float16);
    with `weight_decay`, decoupled weight decay (AdamW) at the same learning rate. `train_steps`
    places `learning_rate_cooldown_steps` at the end of training."""
    optimizer = FusedAdam(
        learning_rate=make_schedule(hparams, train_steps), beta_1=hparams.adam_beta1, beta_2=hparams.adam_beta2,
        epsilon=hparams.adam_epsilon, weight_decay=hparams.weight_decay or None,
    )
    if hparams.mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def make_schedule(hparams: HParams, train_steps: int = 0) -> RsqrtWarmupSchedule:
    """The paper's learning-rate schedule with the hparams' warmup, multiplier and cooldown."""
    return RsqrtWarmupSchedule(
        hparams.hidden_size, hparams.learning_rate_warmup_steps, hparams.learning_rate,
        cooldown_steps=hparams.learning_rate_cooldown_steps, train_steps=train_steps,
    )


def moved_cooldown_note(hparams: HParams, start_step: int, previous_train_steps: int | None, train_steps: int) -> str | None:
    """What a resumed run with a learning-rate cooldown should be told when its --train_steps
    changed (the cooldown moves with it, so the rate may be near 0, or jump back up), or None."""
    if not hparams.learning_rate_cooldown_steps or previous_train_steps in (None, train_steps):
        return None
    rate = float(make_schedule(hparams, train_steps)(start_step))
    no_cooldown = make_schedule(dataclasses.replace(hparams, learning_rate_cooldown_steps=0))
    peak = float(no_cooldown(hparams.learning_rate_warmup_steps - 1))
    return (f"The learning rate cools down to 0 over the last {hparams.learning_rate_cooldown_steps} steps before "
            f"--train_steps (was {previous_train_steps}, now {train_steps}): from step {start_step} it is {rate:.3g} "
            f"({100 * rate / peak:.0f}% of the peak {peak:.3g}).")

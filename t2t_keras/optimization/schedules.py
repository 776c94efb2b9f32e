"""The paper's learning-rate schedule (section 5.3), with an optional linear cooldown."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class RsqrtWarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = multiplier * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warmup for `warmup_steps`, then decay with the inverse square root of the step.
    Keras calls a schedule with the optimizer's `iterations`, the number of updates already
    applied; the update being made is the paper's step number `iterations + 1`, so the first
    update uses step 1 (not 0, which would be a wasted update with rate 0).

    With `cooldown_steps` > 0 (not in the paper) the rate is further multiplied by
    (train_steps - step + 1) / cooldown_steps over the last `cooldown_steps` updates, falling
    linearly to zero at `train_steps`: what short runs on small data gain from averaging
    checkpoints, without having to average.

    Args:
      hidden_size: d_model.
      warmup_steps: 4000 in the paper.
      multiplier: 1.0 in the paper (the hparam `learning_rate`).
      cooldown_steps: 0 in the paper (the hparam `learning_rate_cooldown_steps`).
      train_steps: the last update's step number (the trainer's --train_steps); needed
        with `cooldown_steps`.
    """

    def __init__(self, hidden_size, warmup_steps=4000, multiplier=1.0, cooldown_steps=0, train_steps=0):
        if cooldown_steps and not train_steps:
            raise ValueError("a learning-rate cooldown needs the number of training steps")
        self.hidden_size = int(hidden_size)
        self.warmup_steps = int(warmup_steps)
        self.multiplier = float(multiplier)
        self.cooldown_steps = int(cooldown_steps)
        self.train_steps = int(train_steps)

    def __call__(self, iterations):
        step = ops.cast(iterations, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = self.multiplier * self.hidden_size**-0.5 * ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        if self.cooldown_steps:
            remaining = float(self.train_steps + 1) - step
            rate = rate * ops.clip(remaining / float(self.cooldown_steps), 0.0, 1.0)
        return rate

    def get_config(self):
        return {
            "hidden_size": self.hidden_size, "warmup_steps": self.warmup_steps, "multiplier": self.multiplier,
            "cooldown_steps": self.cooldown_steps, "train_steps": self.train_steps,
        }

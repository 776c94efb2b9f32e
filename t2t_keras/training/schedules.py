"""The paper's learning-rate schedule (section 5.3)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_keras")
class RsqrtWarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = multiplier * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warmup for `warmup_steps`, then decay with the inverse square root of the step.
    Keras calls a schedule with the optimizer's `iterations`, the number of updates already
    applied; the update being made is the paper's step number `iterations + 1`, so the first
    update uses step 1 (not 0, which would be a wasted update with rate 0).

    Args:
      hidden_size: d_model.
      warmup_steps: 4000 in the paper.
      multiplier: 1.0 in the paper (the hparam `learning_rate`).
    """

    def __init__(self, hidden_size, warmup_steps=4000, multiplier=1.0):
        self.hidden_size = int(hidden_size)
        self.warmup_steps = int(warmup_steps)
        self.multiplier = float(multiplier)

    def __call__(self, iterations):
        step = ops.cast(iterations, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        return (
            self.multiplier
            * self.hidden_size**-0.5
            * ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        )

    def get_config(self):
        return {"hidden_size": self.hidden_size, "warmup_steps": self.warmup_steps, "multiplier": self.multiplier}

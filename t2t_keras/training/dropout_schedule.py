"""Residual dropout that changes once during training: a lower rate for the first updates.

On small data the recipe's P_drop both delays the step at which the model learns to use the
source and keeps it from overfitting later; a lower rate early and P_drop after buys both
(docs/log/2026-11-22_to_2026-12-03.md, "Past 41.5": Multi30k rows d4dr1 and d4late). Only the residual and embedding
dropout (P_drop) changes; attention and ReLU dropout keep their rates.
"""

from t2t_keras.hparams_lib import HParams


class ResidualDropoutSchedule:
    """`layer_prepostprocess_dropout_early` for the first `layer_prepostprocess_dropout_early_steps`
    updates, `layer_prepostprocess_dropout` after them.

    A rate is a Python number read when the train step is traced, so a change needs a new trace:
    `set_for(step)` sets the rate of the update after `step` updates and says whether it changed.
    The model builds these layers at the higher of the two rates (Keras gives a layer built at rate
    0 no random state), so either can be set.
    """

    def __init__(self, model, hparams: HParams):
        self.layers = model.residual_dropouts()
        self.early_steps = hparams.layer_prepostprocess_dropout_early_steps
        self.early_rate = hparams.layer_prepostprocess_dropout_early
        self.rate = hparams.layer_prepostprocess_dropout

    def rate_after(self, step: int) -> float:
        """P_drop of the update made after `step` updates."""
        return self.early_rate if step < self.early_steps else self.rate

    def set_for(self, step: int) -> bool:
        """Sets the layers' rate for the update after `step` updates; True if it changed."""
        rate = self.rate_after(step)
        if self.layers[0].rate == rate:  # called before every update: the layers share one rate
            return False
        for layer in self.layers:
            layer.rate = rate
        return True

    def describe(self) -> str:
        return f"residual dropout {self.early_rate:g} for the first {self.early_steps} updates, then {self.rate:g}"

"""The paper's training objective and optimizer (sections 5.3, 5.4): the label-smoothed loss,
Adam and the warmup / inverse square root schedule, as the trainer and `Transformer.compile`
use them."""

from t2t_keras.optimization.adam import FusedAdam
from t2t_keras.optimization.losses import LabelSmoothedCrossEntropy, loss_sum_and_weight, padded_cross_entropy
from t2t_keras.optimization.recipe import make_optimizer, make_schedule
from t2t_keras.optimization.schedules import RsqrtWarmupSchedule

__all__ = ["FusedAdam", "LabelSmoothedCrossEntropy", "RsqrtWarmupSchedule", "loss_sum_and_weight", "make_optimizer",
           "make_schedule", "padded_cross_entropy"]

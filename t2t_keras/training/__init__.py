"""Training pieces: the paper's loss and learning-rate schedule."""

from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy
from t2t_keras.training.losses import loss_sum_and_weight, padded_cross_entropy
from t2t_keras.training.schedules import RsqrtWarmupSchedule

__all__ = ["RsqrtWarmupSchedule", "loss_sum_and_weight", "padded_cross_entropy", "smoothed_cross_entropy"]

"""Training with the trainer: the step (global token normalisation, accumulation), the loop,
evaluation and distribution. The loss, optimizer and schedule are `t2t_keras.optimization`'s."""

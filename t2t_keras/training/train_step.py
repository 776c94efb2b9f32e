"""One optimizer update under a tf.distribute strategy, normalised by the global token count.

The loss of an update is the label-smoothed cross-entropy summed over every real target
token of the update (all replicas, all accumulated batches) divided by their number, so
2 replicas x B/2 sentences, 1 replica x B sentences and 2 accumulated batches of B/2 give
the same gradients. Keras optimizers sum gradients across replicas, so each replica
contributes its loss sum divided by the global count. With `rdrop_alpha` (R-Drop), each
batch is the batch twice, counted as such.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from t2t_keras.hparams_lib import HParams
from t2t_keras.optimization.losses import real_token_sum, real_tokens

SUM = tf.distribute.ReduceOp.SUM


def target_tokens(features):
    return tf.reduce_sum(real_tokens(features["targets"]))


class TrainStep:
    """The update of `model` by `optimizer` from distributed batches.

    Create under `strategy.scope()`. `update(iterator)` reads `gradient_accumulation_steps`
    batches from a distributed iterator and applies one update; it returns the update's
    mean loss per target token and the global number of target tokens.
    """

    def __init__(self, model, optimizer, hparams: HParams, strategy: tf.distribute.Strategy):
        self.model = model
        self.optimizer = optimizer
        self.hparams = hparams
        self.strategy = strategy
        self.accumulation_steps = hparams.gradient_accumulation_steps
        self.variables = model.trainable_variables
        optimizer.build(self.variables)
        if self.accumulation_steps > 1:
            replica_local = dict(
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
            )
            self.gradient_sums = [tf.Variable(tf.zeros(v.shape, v.dtype), **replica_local) for v in self.variables]
            self.loss_sum = tf.Variable(0.0, **replica_local)
            self.token_sum = tf.Variable(0.0, **replica_local)
        self.retrace()

    # --- public ---
    def retrace(self):
        """Drops the traced graphs: the next update traces them again, with the model's Python-level
        settings as they are then (a dropout rate changed by `ResidualDropoutSchedule`)."""
        jit = self.hparams.xla
        # No AutoGraph: these have no tensor-dependent Python control flow to convert.
        self._replica_update = tf.function(self._replica_update_fn, jit_compile=jit, autograph=False)
        self._replica_accumulate = tf.function(self._replica_accumulate_fn, jit_compile=jit, autograph=False)
        self._update_one = tf.function(self._update_one_fn, autograph=False)
        self._accumulate = tf.function(self._accumulate_fn, autograph=False)
        self._apply_accumulated = tf.function(self._apply_accumulated_fn, autograph=False)

    def update(self, iterator):
        """One optimizer update; returns (mean loss per target token, target tokens) as tensors."""
        if self.accumulation_steps == 1:
            return self._update_one(iterator)
        for _ in range(self.accumulation_steps):
            self._accumulate(iterator)
        return self._apply_accumulated()

    # --- replica functions ---
    def loss_sum_gradients(self, features, divisor):
        """(Gradients of (loss summed over this replica's real tokens) / divisor, that loss sum).

        What every update is made of, in replica context; `update` all-reduces it. `features`
        as `_as_trained` made them.
        """
        with tf.GradientTape() as tape:
            token_losses = self.model.token_losses(
                features, self.hparams.label_smoothing, training=True, rdrop_alpha=self.hparams.rdrop_alpha
            )
            loss_sum, _ = real_token_sum(features["targets"], token_losses)
            loss = loss_sum / tf.maximum(divisor, 1.0)
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                loss = self.optimizer.scale_loss(loss)
        return tape.gradient(loss, self.variables), loss_sum

    def _as_trained(self, features):
        """The batch as the update sees it: for R-Drop, every sentence twice (rows b and b + B)."""
        if not self.hparams.rdrop_alpha:
            return features
        return {name: tf.concat([value, value], axis=0) for name, value in features.items()}

    def _replica_update_fn(self, features):
        features = self._as_trained(features)
        context = tf.distribute.get_replica_context()
        global_tokens = context.all_reduce(SUM, target_tokens(features))
        gradients, loss_sum = self.loss_sum_gradients(features, global_tokens)
        self.optimizer.apply_gradients(zip(gradients, self.variables))
        return context.all_reduce(SUM, loss_sum) / tf.maximum(global_tokens, 1.0), global_tokens

    def _replica_accumulate_fn(self, features):
        features = self._as_trained(features)
        gradients, loss_sum = self.loss_sum_gradients(features, tf.constant(1.0))
        for total, gradient in zip(self.gradient_sums, gradients):
            total.assign_add(tf.convert_to_tensor(gradient))
        self.loss_sum.assign_add(loss_sum)
        self.token_sum.assign_add(target_tokens(features))

    def _replica_apply_fn(self):
        context = tf.distribute.get_replica_context()
        global_tokens = tf.maximum(context.all_reduce(SUM, self.token_sum.read_value()), 1.0)
        self.optimizer.apply_gradients(zip([g.read_value() / global_tokens for g in self.gradient_sums], self.variables))
        loss = context.all_reduce(SUM, self.loss_sum.read_value()) / global_tokens
        for variable in (*self.gradient_sums, self.loss_sum, self.token_sum):
            variable.assign(tf.zeros_like(variable))
        return loss, global_tokens

    # --- cross-replica functions ---
    def _update_one_fn(self, iterator):
        loss, tokens = self.strategy.run(self._replica_update, args=(next(iterator),))
        return self._first(loss), self._first(tokens)

    def _accumulate_fn(self, iterator):
        self.strategy.run(self._replica_accumulate, args=(next(iterator),))

    def _apply_accumulated_fn(self):
        loss, tokens = self.strategy.run(self._replica_apply_fn)
        return self._first(loss), self._first(tokens)

    def _first(self, value):
        """A value all replicas agree on (it was all-reduced), from the first replica."""
        return self.strategy.experimental_local_results(value)[0]

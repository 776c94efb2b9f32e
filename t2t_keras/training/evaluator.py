"""Evaluation during training: dev loss, perplexity, per-token accuracy and real BLEU.

BLEU is detokenised sacreBLEU on the first `bleu_sentences` dev pairs, translated with beam
search (the problem's decode defaults) and compared with the detokenised references.
"""

from __future__ import annotations

import numpy as np
import sacrebleu
import tensorflow as tf

from t2t_keras.data import manifest
from t2t_keras.data.tfrecords import parse_examples
from t2t_keras.decoding.translator import Translator
from t2t_keras.token_ids import PAD_ID
from t2t_keras.training.losses import smoothed_cross_entropy

SUM = tf.distribute.ReduceOp.SUM


class Evaluator:
    """Computes dev metrics for the current weights of `model`."""

    def __init__(self, problem, data_dir, model, vocabulary, hparams, strategy, eval_steps=0, bleu_sentences=100):
        self.problem = problem
        self.data_dir = data_dir
        self.model = model
        self.vocabulary = vocabulary
        self.hparams = hparams
        self.strategy = strategy
        self.eval_steps = eval_steps
        self.bleu_sentences = bleu_sentences
        self.translator = Translator(model, vocabulary, problem.decode_defaults) if bleu_sentences else None
        self._run = tf.function(self._run_fn)

    def evaluate(self) -> dict:
        dataset = self.strategy.distribute_datasets_from_function(
            lambda context: self.problem.dataset(
                self.problem.eval_split, self.data_dir, self.hparams.tokens_per_batch, training=False, input_context=context
            )
        )
        max_steps = self.eval_steps or np.iinfo(np.int32).max
        loss_sum, nll_sum, correct, tokens = (float(v) for v in self._run(iter(dataset), tf.constant(max_steps)))
        tokens = max(tokens, 1.0)
        metrics = {
            "loss": loss_sum / tokens,
            "nll": nll_sum / tokens,
            "perplexity": float(np.exp(min(nll_sum / tokens, 50.0))),
            "accuracy": correct / tokens,
            "tokens": tokens,
        }
        if self.bleu_sentences:
            metrics["bleu"] = self.bleu()
        return metrics

    def _run_fn(self, iterator, max_steps):
        totals = tf.zeros([4])
        for _ in tf.range(max_steps):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            per_replica = self.strategy.run(self._replica_sums, args=(optional.get_value(),))
            totals += self.strategy.reduce(SUM, per_replica, axis=None)
        return totals

    def _replica_sums(self, features):
        targets = features["targets"]
        logits = self.model(features, training=False)
        weights = tf.cast(targets != PAD_ID, tf.float32)
        smoothed = smoothed_cross_entropy(targets, logits, self.hparams.label_smoothing)
        nll = smoothed_cross_entropy(targets, logits, 0.0)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), targets), tf.float32)
        return tf.stack([tf.reduce_sum(v * weights) for v in (smoothed, nll, correct, tf.ones_like(weights))])

    def bleu(self) -> float:
        """Detokenised sacreBLEU of beam-search translations of the first dev pairs."""
        files = manifest.shard_files(self.problem, self.data_dir, self.problem.eval_split)
        block = next(iter(tf.data.TFRecordDataset(files).take(self.bleu_sentences).batch(self.bleu_sentences)))
        inputs, targets = parse_examples(block)
        hypotheses = []
        batch = self.problem.decode_defaults.sentences_per_batch
        for start in range(0, int(inputs.nrows()), batch):
            result = self.translator.translate_ids(inputs[start : start + batch].to_tensor())
            hypotheses += [self.vocabulary.decode(ids) for ids in result["ids"][:, 0].numpy()]
        references = [self.vocabulary.decode(ids) for ids in targets.to_list()]
        return sacrebleu.corpus_bleu(hypotheses, [references]).score

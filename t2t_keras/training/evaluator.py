"""Evaluation during training: dev loss, perplexity, accuracy, whether the model reads its
source, and the problem's own score of decoded dev sentences.

Every evaluation reports, over the whole dev split (or `eval_steps` batches):
  loss, nll, perplexity, accuracy   teacher-forced, per real target token;
  shuffled_source_nll               the same nll with each batch's sources rolled by one
                                    sentence, so every target is paired with another source;
  source_gap                        shuffled_source_nll - nll: how many nats per token the true
                                    source is worth. About 0 means the decoder ignores the
                                    encoder (a language model of the targets);
and, for the first `score_sentences` dev sentences, the problem's score (`Problem.score_name`:
BLEU for translation, with chrF2 beside it; EVALB F1 for parsing) of their beam-search outputs (the problem's
decode defaults, or `decode_hparams`), postprocessed and scored exactly as the decoder CLI does.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from t2t_keras.kernels.cross_entropy import smoothed_cross_entropy
from t2t_keras.token_ids import PAD_ID
from t2t_keras.translator import Translator

SUM = tf.distribute.ReduceOp.SUM
SUMS = ("loss", "nll", "shuffled_source_nll", "correct", "tokens")


class Evaluator:
    """Computes dev metrics for the current weights of `model`."""

    def __init__(self, problem, data_dir, model, vocabularies, hparams, strategy, eval_steps=0, score_sentences=100,
                 decode_hparams=None, shortlist=None, selects_by_score=False):
        self.problem = problem
        self.data_dir = data_dir
        self.model = model
        self.hparams = hparams
        self.strategy = strategy
        self.eval_steps = eval_steps
        self.score_sentences = score_sentences
        # Whether the score picks checkpoints (--keep_best, early stopping): then a dev set too small
        # to tell checkpoints apart is worth a warning, once.
        self.check_dev_size = selects_by_score and problem.score_name == "bleu"
        if score_sentences:
            # The decoder's engine, with the training process's threads as they are. precision=bf16:
            # a bfloat16 copy decodes, given the trained weights at each evaluation.
            settings = dataclasses.asdict(decode_hparams or problem.decode_settings())
            self.translator = Translator.from_model(model, vocabularies, problem, shortlist_table=shortlist, tune_process=False,
                                                    **settings)
            self.sources, self.references = problem.dev_examples(data_dir, score_sentences)
        self._run = tf.function(self._run_fn)

    def evaluate(self) -> dict:
        dataset = self.strategy.distribute_datasets_from_function(
            lambda context: self.problem.dataset(
                self.problem.eval_split, self.data_dir, self.hparams.tokens_per_batch, training=False, input_context=context
            )
        )
        max_steps = self.eval_steps or np.iinfo(np.int32).max
        sums = dict(zip(SUMS, (float(v) for v in self._run(iter(dataset), tf.constant(max_steps)))))
        tokens = max(sums["tokens"], 1.0)
        metrics = {
            "loss": sums["loss"] / tokens,
            "nll": sums["nll"] / tokens,
            "perplexity": float(np.exp(min(sums["nll"] / tokens, 50.0))),
            "accuracy": sums["correct"] / tokens,
            "shuffled_source_nll": sums["shuffled_source_nll"] / tokens,
            "source_gap": (sums["shuffled_source_nll"] - sums["nll"]) / tokens,
            "tokens": sums["tokens"],
        }
        if self.score_sentences:
            score = self.score()
            metrics[self.problem.score_name] = score.value
            metrics.update(score.extra)  # e.g. chrF beside BLEU
        return metrics

    def _run_fn(self, iterator, max_steps):
        totals = tf.zeros([len(SUMS)])
        for _ in tf.range(max_steps):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            per_replica = self.strategy.run(self._replica_sums, args=(optional.get_value(),))
            totals += self.strategy.reduce(SUM, per_replica, axis=None)
        return totals

    @tf.autograph.experimental.do_not_convert  # AutoGraph is for _run_fn's loop, not for the model
    def _replica_sums(self, features):
        targets = features["targets"]
        weights = tf.cast(targets != PAD_ID, tf.float32)
        logits = self.model(features, training=False)
        smoothed = smoothed_cross_entropy(targets, logits, self.hparams.label_smoothing)
        nll = smoothed_cross_entropy(targets, logits, 0.0)
        shuffled = {"inputs": tf.roll(features["inputs"], shift=1, axis=0), "targets": targets}
        shuffled_nll = smoothed_cross_entropy(targets, self.model(shuffled, training=False), 0.0)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), targets), tf.float32)
        return tf.stack([tf.reduce_sum(v * weights) for v in (smoothed, nll, shuffled_nll, correct, tf.ones_like(weights))])

    def score(self):
        """The problem's `Score` of the beam-search outputs of the first dev sentences."""
        outputs = self._decode(self.sources)
        if self.check_dev_size:
            self.check_dev_size = False
            _warn_if_dev_too_small(outputs, self.references, getattr(self.problem, "target_language", ""))
        return self.problem.score_outputs(outputs, self.references)

    def dev_examples(self, sentences: int = 0) -> tuple[list, list]:
        """(sources, references) of the first `sentences` dev sentences (0: the evaluations' ones)."""
        if not sentences or sentences == len(self.sources):
            return self.sources, self.references
        return self.problem.dev_examples(self.data_dir, sentences)

    def scores_by_alpha(self, alphas, sources, references) -> dict:
        """{alpha: the problem's score} of `sources` decoded with each length-penalty alpha, the
        other settings the evaluations': how much longer outputs the model's own length preference
        wants, which depends on the model and its data (trainer's alpha choice)."""
        return {alpha: self.problem.score_outputs(self._decode(sources, alpha=alpha), references).value for alpha in alphas}

    def _decode(self, sources, **settings) -> list[str]:
        """The best outputs of `sources`, in the problem's output form, under the model's current weights."""
        decode_model = self.translator.model
        if decode_model is not self.model:
            decode_model.set_weights(self.model.get_weights())
        return self.translator.generate(sources, **settings)


# What checkpoint selection decides between here is 1-2 BLEU (a fine-tuning run's gain:
# docs/results/fine_tuning.md; an average against its last checkpoint: docs/results/multi30k.md,
# "Tried, not adopted"). A dev set whose own BLEU
# is uncertain by more than that (the 95% bootstrap half-width: about 2.7 at 300 Multi30k
# sentences, 1.4 at the whole val set of 1014) picks among such checkpoints largely by chance.
DEV_BLEU_INTERVAL_LIMIT = 2.0


def _warn_if_dev_too_small(outputs, references, language) -> None:
    from absl import logging

    from t2t_keras.evaluation.bleu import bleu_interval

    half_width = bleu_interval(outputs, references, language)
    if half_width > DEV_BLEU_INTERVAL_LIMIT:
        logging.warning(
            "dev BLEU on these %d sentences is only known to +-%.1f (95%% bootstrap interval): checkpoints closer than "
            "that are picked by chance; score more dev sentences (--eval_sentences, a larger dev set) or select by "
            "--keep_best=loss.", len(references), half_width)

"""Several trained models decoding as one: at every step, the log of the mean of their
next-token probabilities (fairseq's ensemble), so beam search, sampling and scoring run on
the ensemble exactly as on one model.

    translator = Translator.from_preset("runs/a", ensemble=["runs/b", "runs/c"])
"""

from __future__ import annotations

import math

import tensorflow as tf


class Ensemble(tf.Module):
    """The models' interface for decoding (encode, init_decoding, output_weights, decode_step, and a teacher-forced
    call for scoring), returning log mean probabilities where a model returns logits. The
    models must share their vocabularies (`TrainedRun` checks)."""

    def __init__(self, models):
        super().__init__(name="ensemble")
        self.models = list(models)
        self.hparams = self.models[0].hparams
        self.target_vocab_size = self.models[0].target_vocab_size
        # What the decode kernel choices are timed on: the first member's (the members share the vocabulary).
        self.softmax_projection = self.models[0].softmax_projection

    def _mean_probabilities(self, logits: list):
        log_probs = tf.stack([tf.nn.log_softmax(tf.cast(x, tf.float32), axis=-1) for x in logits])
        return tf.reduce_logsumexp(log_probs, axis=0) - math.log(len(logits))

    def __call__(self, features, training=None):
        return self._mean_probabilities([model(features, training=training) for model in self.models])

    def encode(self, inputs, training=None):
        return tuple(model.encode(inputs, training=training) for model in self.models)

    def init_decoding(self, encoded, beam_size: int = 1) -> tuple[tuple, tuple]:
        """(one `DecoderMemory` per model, one `DecoderCache` per model)."""
        memories, caches = zip(*(model.init_decoding(e, beam_size) for model, e in zip(self.models, encoded)))
        return memories, caches

    def output_weights(self, vocabulary=None, product: str = "nn") -> tuple:
        return tuple(model.output_weights(vocabulary, product) for model in self.models)

    def decode_step(self, ids, index, cache: tuple, memory: tuple, output_weights: tuple, float32_logits: bool = True,
                    group_rows=None, native_attention: bool = False):
        """The members' steps, their probabilities averaged: float32 logits whatever `float32_logits` asks."""
        steps = [model.decode_step(ids, index, c, m, w, group_rows=group_rows, native_attention=native_attention)
                 for model, c, m, w in zip(self.models, cache, memory, output_weights)]
        return self._mean_probabilities([logits for logits, _ in steps]), tuple(c for _, c in steps)

"""Translator: source ids or text -> beam search over the cached model -> target ids or text.

One object serves the decoder CLI, the trainer's BLEU evaluation and the exported
SavedModel: `translate_ids` and `translate_text` are tf.functions of TensorFlow and
tensorflow_text ops only, so the exporter can put them into the graph as they are.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_keras.data.tokenizers import EOS_ID
from t2t_keras.decoding.beam_search import beam_search, tile_for_beams
from t2t_keras.problem import DecodeHParams


class Translator(tf.Module):
    """Beam search translation with a trained Transformer.

    Do not call tf.random.set_seed (or keras.utils.set_random_seed) after creating one: it
    clears TensorFlow's eager kernel cache, which destroys the tensorflow_text SentencePiece
    resource the text signature uses (a NotFoundError on the next translate_text).

    Args:
      model: a built `Transformer`.
      vocabulary: the problem's `Vocabulary` (for the text signatures).
      decode_hparams: beam size, alpha, extra length.
    """

    def __init__(self, model, vocabulary, decode_hparams: DecodeHParams):
        super().__init__(name="translator")
        self.model = model
        self.vocabulary = vocabulary
        self.decode_hparams = decode_hparams.validated()
        self.tokenizer = vocabulary.tf_tokenizer(add_eos=True)
        self.max_position = model.hparams.max_position if model.hparams.positional_encoding == "learned" else None

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def translate_ids(self, input_ids):
        """Source ids [B, S] (EOS-terminated, 0-padded) -> {ids [B, K, L], scores [B, K], lengths [B, K]}."""
        hp = self.decode_hparams
        batch_size = tf.shape(input_ids)[0]
        input_lengths = tf.reduce_sum(tf.cast(input_ids != 0, tf.int32), axis=1)
        max_lengths = input_lengths + hp.extra_length
        if self.max_position is not None:  # a learned position table ends somewhere
            max_lengths = tf.minimum(max_lengths, self.max_position)
        encoded = self.model.encode(input_ids, training=False)
        encoded = tf.nest.map_structure(lambda t: tile_for_beams(t, hp.beam_size), encoded)
        cache = self.model.init_cache(encoded, tf.reduce_max(max_lengths))
        result = beam_search(
            self.model.decode_step, cache, batch_size, hp.beam_size, hp.alpha, max_lengths, eos_id=EOS_ID,
            reorder_state=lambda state, reorder_fn: state.reorder(reorder_fn),
        )
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate_text(self, sentences):
        """Raw sentences [B] -> {outputs [B] (best translation), scores [B]}."""
        # The SentencePiece resource lives on one host device; with several logical CPUs the
        # placer could otherwise run tokenize and detokenize where it does not exist.
        with tf.device("/device:CPU:0"):
            input_ids = self.tokenizer.tokenize(sentences).to_tensor(default_value=0)
        result = self.translate_ids(input_ids)
        best_ids = result["ids"][:, 0]
        without_eos = tf.RaggedTensor.from_tensor(best_ids, lengths=tf.maximum(result["lengths"][:, 0] - 1, 0))
        with tf.device("/device:CPU:0"):
            outputs = self.tokenizer.detokenize(without_eos)
        return {"outputs": outputs, "scores": result["scores"][:, 0]}

"""Word alignments from a model's cross-attention: which source word each target word was
translated from, as (source word, target word) index pairs over whitespace words.

    links = attention_links(model, vocabularies, sources, targets, layer=-1)
    # [{(0, 0), (1, 1), ...}, ...]: Pharaoh "i-j" = (i, j)

A teacher-forced pass reads the attention of one decoder layer (its mean over `heads`, () for
all) from each target piece to each source piece: `shift` 0 reads the query that predicts the
piece, 1 the query whose input it is (the next step's, which aligns better in some models:
Garg et al., 2019; not the demo model's). Pieces are merged into words (SentencePiece's word-start marks), a target word's
attention being its pieces' mean and a source word's its pieces' sum; each target word is
linked to the source word it attends to most. Which layer, heads and shift align a model's
words best is measured: benchmarks/alignment_heads.py, against reference links or identical
words (docs/results/decoding_speed.md, "Word alignments").
"""

from __future__ import annotations

import numpy as np

from t2t_keras.data.word_alignments import word_of_pieces
CANDIDATE_SHIFTS = (0, 1)
SHIFT = 0  # the query that predicts a piece: on the demo model far better than the next step's (AER 0.28 against 0.88)


def candidate_heads(layers: int, heads: int):
    """(layer, heads) of each layer's heads one by one and all together (())."""
    for layer in range(layers):
        yield layer, ()
        for head in range(heads):
            yield layer, (head,)


def links_of(attention: np.ndarray, source_words: np.ndarray, target_words: np.ndarray) -> set:
    """The links of one pair from its piece attention [T, S] (real pieces only, EOS excluded):
    each target word to the source word with the most attention."""
    source_count, target_count = int(source_words.max(initial=-1)) + 1, int(target_words.max(initial=-1)) + 1
    if not source_count or not target_count:
        return set()
    to_source_words = np.zeros([attention.shape[1], source_count])
    to_source_words[np.arange(attention.shape[1]), source_words] = 1.0
    by_word = attention @ to_source_words  # [T, source words]: a source word's pieces summed
    merged = np.zeros([target_count, source_count])
    np.add.at(merged, target_words, by_word)
    merged /= np.bincount(target_words, minlength=target_count)[:, None]  # a target word's pieces' mean
    return {(int(np.argmax(merged[j])), j) for j in range(target_count)}


class CrossAttention:
    """A model's cross-attention weights of one decoder layer in a teacher-forced pass, as one
    traced graph for every batch shape (kept by whoever aligns many batches: the engine)."""

    def __init__(self, model, layer: int):
        import tensorflow as tf

        self.model, self.layer = model, layer
        self._weights = tf.function(lambda inputs, targets: model.attention_weights(inputs, targets)["encoder_decoder"][layer],
                                    input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2, autograph=False)

    def __call__(self, source_ids, target_ids) -> np.ndarray:
        """float32 [B, h, T, S] of 0-padded id batches."""
        import tensorflow as tf

        return np.asarray(tf.cast(self._weights(source_ids, target_ids), tf.float32))


def attention_links(model, vocabularies, sources: list[str], targets: list[str], layer: int = -1, heads=(),
                    shift: int = SHIFT, batch_size: int = 64, attention: CrossAttention | None = None) -> list[set]:
    """The links of each (source, target) pair of texts (an empty set for an empty side), read
    from decoder layer `layer`'s cross-attention (the mean over `heads`; (): all), `shift` 0 or 1
    (see the module docstring), in batches of `batch_size` pairs; `attention`, the model's
    `CrossAttention` of that layer if one is kept."""
    from t2t_keras.decoding.line_decoding import padded_batch

    attention = attention or CrossAttention(model, layer)
    found = []
    for start in range(0, len(sources), batch_size):
        chunk = list(zip(sources[start:start + batch_size], targets[start:start + batch_size]))
        source_ids = [vocabularies.source.encode(s, add_eos=True) for s, _ in chunk]
        target_ids = [vocabularies.target.encode(t, add_eos=True) for _, t in chunk]
        weights = attention(padded_batch(source_ids), padded_batch(target_ids))  # [B, h, T, S]
        weights = weights[:, list(heads)] if heads else weights
        weights = weights.mean(axis=1)
        for row, ((source, target), source_row, target_row) in enumerate(zip(chunk, source_ids, target_ids)):
            real_source, real_target = len(source_row) - 1, len(target_row) - 1  # without EOS
            if not source.strip() or not target.strip() or not real_source or not real_target:
                found.append(set())
                continue
            # Row t + shift is read for target piece t; the last piece's next step is EOS's.
            pair = weights[row, shift:shift + real_target, :real_source]
            pair = pair / np.maximum(pair.sum(axis=1, keepdims=True), 1e-9)
            found.append(links_of(pair, word_of_pieces(vocabularies.source.pieces(source_row[:-1])),
                                  word_of_pieces(vocabularies.target.pieces(target_row[:-1]))))
    return found


def pharaoh(links: set) -> str:
    """"i-j i-j ...", source index first, sorted by target then source word."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links, key=lambda link: (link[1], link[0])))

"""A lexical shortlist: the target tokens a batch's translations may use, from its source tokens.

The output product (d_model x vocabulary per hypothesis and step) is most of a small model's
decode step. A shortlist restricts it to the tokens a batch can plausibly need, as Marian's
lexical shortlists and CTranslate2's vocabulary map do: the `frequent` most frequent target
tokens, and for every source token of the batch its `per_source` most associated target
tokens. Association is the Dice coefficient of co-occurrence in training pairs,
2 c(s, t) / (c(s) + c(t)), counting pairs that contain the token (not occurrences), so that
"dog" lists "Hund" before the "." that follows every sentence (the frequent list has those).

    shortlist = Shortlist.from_pairs(pairs, vocab_size, vocab_size)   # (source ids, target ids) pairs
    batch_decoding.search_batch(model, input_ids, ..., shortlist=shortlist)

The search then ranks and normalises over the batch's `vocabulary` only; the speed it gains
and the val BLEU it costs are in EXPERIMENTS.md ("Vocabulary shortlist").
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import numpy as np

from t2t_keras.hparams_lib import SHORTLIST_MAX_FREQUENT, SHORTLIST_MAX_PER_SOURCE
from t2t_keras.token_ids import PAD_ID

NUM_RESERVED = 3  # PAD, EOS, UNK (token_ids): always in the shortlist, so EOS keeps its column
MAX_PAIRS = 1_000_000  # training pairs counted (the first ones): a bounded start-up cost on WMT14's 4.5M


class Shortlist(NamedTuple):
    candidates: np.ndarray  # int32 [source vocabulary, per_source]: each source token's most associated target tokens (PAD-padded)
    frequent: np.ndarray  # int32 [frequent]: the most frequent target tokens

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Sequence[int], Sequence[int]]], source_vocab_size: int,
                   target_vocab_size: int, per_source: int = 50, frequent: int = 100,
                   chunk_pairs: int = 20000) -> "Shortlist":
        """Counts the (source token, target token) co-occurrences of `pairs` (token id lists)
        `chunk_pairs` at a time (a sparse count: memory follows the distinct co-occurring
        pairs, never source x target vocabulary) and keeps each source token's `per_source`
        best by Dice."""
        source_counts = np.zeros(source_vocab_size, np.int64)
        target_counts = np.zeros(target_vocab_size, np.int64)
        keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        chunk = []

        def merge(chunk, keys, counts):
            fresh = np.concatenate(chunk)
            merged, inverse = np.unique(np.concatenate([keys, fresh]), return_inverse=True)
            totals = np.bincount(inverse, weights=np.concatenate([counts, np.ones(len(fresh), np.int64)]))
            return merged, totals.astype(np.int64)

        for source, target in pairs:
            source = np.unique(np.asarray(source, np.int64))
            target = np.unique(np.asarray(target, np.int64))
            source_counts[source] += 1
            target_counts[target] += 1
            chunk.append((source[:, None] * target_vocab_size + target[None, :]).ravel())
            if len(chunk) == chunk_pairs:
                keys, counts = merge(chunk, keys, counts)
                chunk = []
        if chunk:
            keys, counts = merge(chunk, keys, counts)

        sources, targets = keys // target_vocab_size, keys % target_vocab_size
        dice = 2.0 * counts / (source_counts[sources] + target_counts[targets])
        order = np.lexsort((-dice, sources))  # by source token, best first within each
        sources, targets = sources[order], targets[order]
        starts = np.searchsorted(sources, sources, side="left")
        rank = np.arange(len(sources)) - starts
        keep = rank < per_source
        candidates = np.full([source_vocab_size, per_source], PAD_ID, np.int32)
        candidates[sources[keep], rank[keep]] = targets[keep]
        most_frequent = np.argsort(-target_counts, kind="stable")[:frequent].astype(np.int32)
        return cls(candidates, most_frequent)

    @classmethod
    def from_data_dir(cls, problem, data_dir: str, vocabularies) -> "Shortlist":
        """From the first MAX_PAIRS training pairs datagen wrote, as long as decode settings may ask."""
        import tensorflow as tf

        from t2t_keras.data import manifest, tfrecords

        records = tf.data.TFRecordDataset(manifest.shard_files(problem, data_dir, "train")).take(MAX_PAIRS)

        def pairs():
            for block in records.batch(4096):
                inputs, targets = tfrecords.parse_examples(block)
                yield from zip(inputs.numpy(), targets.numpy())

        return cls.from_pairs(pairs(), vocabularies.source.size, vocabularies.target.size,
                              per_source=SHORTLIST_MAX_PER_SOURCE, frequent=SHORTLIST_MAX_FREQUENT)

    def merged(self, other: "Shortlist") -> "Shortlist":
        """Both shortlists in one of this one's size, their candidates alternating by rank
        (this one's first), each token once: a fine-tuned run's own pairs and its parent's."""
        def alternate(ours, theirs, width):
            both = np.stack([ours, theirs], axis=-1).reshape(-1)
            _, first = np.unique(both, return_index=True)
            kept = both[np.sort(first)]
            kept = kept[kept != PAD_ID][:width]  # PAD pads a row short of candidates
            return np.pad(kept, (0, width - len(kept)), constant_values=PAD_ID)

        width = self.candidates.shape[1]
        candidates = np.stack([alternate(ours, theirs, width) for ours, theirs in zip(self.candidates, other.candidates)])
        frequent = alternate(self.frequent, other.frequent, len(self.frequent))
        return Shortlist(candidates.astype(np.int32), frequent.astype(np.int32))

    def limited(self, per_source: int, frequent: int) -> "Shortlist":
        """The same shortlist with each source token's `per_source` best candidates and the
        `frequent` most frequent tokens only."""
        return Shortlist(self.candidates[:, :per_source], self.frequent[:frequent])

    def vocabulary(self, input_ids):
        """int32 [V'] ascending: the reserved tokens, the frequent ones and the candidates of
        the source ids [B, S], once each. (A name spelled alike on both sides is its own best
        candidate: Dice 1.)"""
        import tensorflow as tf

        input_ids = tf.cast(input_ids, tf.int32)
        ids = tf.concat([
            tf.range(NUM_RESERVED, dtype=tf.int32),
            tf.constant(self.frequent),
            tf.reshape(tf.gather(tf.constant(self.candidates), input_ids), [-1]),
        ], axis=0)
        return tf.sort(tf.unique(ids)[0])

    def save(self, path: str) -> None:
        """An .npz file, written atomically."""
        import io

        from t2t_keras import files

        buffer = io.BytesIO()
        np.savez(buffer, candidates=self.candidates, frequent=self.frequent)
        files.write_atomically(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str) -> "Shortlist":
        import io

        from t2t_keras import files

        with np.load(io.BytesIO(files.read_bytes(path))) as arrays:
            return cls(arrays["candidates"].astype(np.int32), arrays["frequent"].astype(np.int32))

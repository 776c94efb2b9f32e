"""A lexical shortlist: the target tokens a sentence's translation may use, from its source tokens.

The output product (d_model x vocabulary per hypothesis and step) is most of a small model's
decode step. A shortlist restricts it to the tokens a sentence can plausibly need, as Marian's
lexical shortlists and CTranslate2's vocabulary map do: the `frequent` most frequent target
tokens, and for every source token of the batch its `per_source` most associated target
tokens. Association is the Dice coefficient of co-occurrence in training pairs,
2 c(s, t) / (c(s) + c(t)), counting pairs that contain the token (not occurrences), so that
"dog" lists "Hund" before the "." that follows every sentence (the frequent list has those).

    shortlist = Shortlist.from_pairs(pairs, vocab_size, vocab_size)   # (source ids, target ids) pairs
    graph_search.search_batch(model, input_ids, ..., shortlist=shortlist)

The batch's sentences are searched in groups (`vocabularies`): each group's hypotheses are
multiplied by the output rows of the union of its sentences' lists only (a smaller union than
the whole batch's: fewer columns to multiply and to rank), and each sentence is ranked and
normalised over its own list (`sentence_mask`); the speed it gains and the val BLEU it costs
are in docs/results/decoding_speed.md, "Shortlist".
"""

from __future__ import annotations

import itertools
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from t2t_keras.hparams_lib import SHORTLIST_MAX_FREQUENT, SHORTLIST_MAX_PER_SOURCE
from t2t_keras.token_ids import EOS_ID, PAD_ID, UNK_ID

NUM_RESERVED = max(PAD_ID, EOS_ID, UNK_ID) + 1  # always in the shortlist, so EOS keeps its column
MAX_PAIRS = 1_000_000  # training pairs counted (the first ones): a bounded start-up cost on WMT14's 4.5M
MERGE_FLOOR = 1 << 22  # a merge waits for this many unmerged co-occurrence entries (64 MB of keys), or as many as are merged


class Shortlist(NamedTuple):
    candidates: np.ndarray  # int32 [source vocabulary, per_source]: each source token's most associated target tokens (PAD-padded)
    frequent: np.ndarray  # int32 [frequent]: the most frequent target tokens

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Sequence[int], Sequence[int]]], source_vocab_size: int,
                   target_vocab_size: int, per_source: int = 50, frequent: int = 100,
                   block_pairs: int = 4096) -> "Shortlist":
        """From (source ids, target ids) pairs, counted `block_pairs` at a time."""
        def blocks():
            pairs_iter = iter(pairs)
            while block := list(itertools.islice(pairs_iter, block_pairs)):
                sources, targets = zip(*block)
                yield _flat(sources) + _flat(targets)

        return cls.from_blocks(blocks(), source_vocab_size, target_vocab_size, per_source, frequent)

    @classmethod
    def from_blocks(cls, blocks, source_vocab_size: int, target_vocab_size: int, per_source: int,
                    frequent: int) -> "Shortlist":
        """Counts (source token, target token) co-occurrences over blocks of pairs, each as
        (source values, source row splits, target values, target row splits), vectorised
        within a block and summed sparsely (memory follows the distinct co-occurring pairs,
        never source x target vocabulary), and keeps each source token's `per_source` best
        by Dice."""
        source_counts = np.zeros(source_vocab_size, np.int64)
        target_counts = np.zeros(target_vocab_size, np.int64)
        keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        pending_keys, pending_counts = [], []  # blocks' counts not yet merged into (keys, counts)
        for source_values, source_splits, target_values, target_splits in blocks:
            source_values, source_splits = _distinct_per_row(source_values, source_splits, source_vocab_size)
            target_values, target_splits = _distinct_per_row(target_values, target_splits, target_vocab_size)
            source_counts += np.bincount(source_values, minlength=source_vocab_size)
            target_counts += np.bincount(target_values, minlength=target_vocab_size)
            block_keys, block_counts = np.unique(
                _cross_products(source_values, source_splits, target_values, target_splits, target_vocab_size),
                return_counts=True)
            pending_keys.append(block_keys)
            pending_counts.append(block_counts)
            # Merged only once the pending entries outnumber the merged ones (and a floor):
            # each entry is re-sorted O(log blocks) times, not once per later block.
            if sum(map(len, pending_keys)) > max(len(keys), MERGE_FLOOR):
                keys, counts = _merged_counts([keys, *pending_keys], [counts, *pending_counts])
                pending_keys, pending_counts = [], []
        keys, counts = _merged_counts([keys, *pending_keys], [counts, *pending_counts])

        sources, targets = keys // target_vocab_size, keys % target_vocab_size
        dice = 2.0 * counts / (source_counts[sources] + target_counts[targets])
        order = np.lexsort((-dice, sources))  # by source token, best first within each
        sources, targets = sources[order], targets[order]
        rank = np.arange(len(sources)) - np.searchsorted(sources, sources, side="left")
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

        def blocks():
            for block in records.batch(4096):
                inputs, targets = tfrecords.parse_examples(block)
                yield tuple(part.numpy() for ragged in (inputs, targets) for part in (ragged.flat_values, ragged.row_splits))

        return cls.from_blocks(blocks(), vocabularies.source.size, vocabularies.target.size,
                               SHORTLIST_MAX_PER_SOURCE, SHORTLIST_MAX_FREQUENT)

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

    def vocabularies(self, input_ids, groups: int, extra_ids=None, target_size: int | None = None):
        """(int32 [groups, V'], int32 [B]): the output rows of each group of the source ids [B, S]
        (contiguous runs of ceil(B / groups) sentences; the last groups may be empty) and each
        sentence's group. A group's row holds, ascending and once each, the reserved tokens, the
        frequent ones and its sentences' candidates (and their `extra_ids` [B, E], target ids a
        prefix forces or completes, of a vocabulary of `target_size`): the rows its hypotheses'
        step multiplies by. (A name spelled alike on both sides is its own best candidate: Dice 1.) The
        reserved tokens lead every row, so EOS has the same column in each. Each row's last
        token is repeated up to V' (the longest row rounded up to a multiple of TOP_K_BLOCK
        columns), in columns `sentence_mask` never allows, so that beam search's blocked top-k
        needs no padded copy of the logits at every step."""
        import tensorflow as tf

        from t2t_keras.kernels.top_k import TOP_K_BLOCK

        candidates = self._candidates_of(input_ids, extra_ids)  # [B, S * K (+ E)]
        batch, tokens_width = tf.shape(candidates)[0], self._width(target_size)
        sentence_groups = tf.range(batch) // tf.maximum((batch + groups - 1) // groups, 1)
        listed = tf.reshape(_indicator(tf.reshape(sentence_groups[:, None] * tokens_width + candidates, [-1]),
                                       groups * tokens_width), [groups, tokens_width])
        listed = listed | _indicator(self._always(), tokens_width)[None, :]
        group_of, tokens = tf.unstack(tf.cast(tf.where(listed), tf.int32), axis=1)  # row-major: ascending within a group
        lists = tf.RaggedTensor.from_value_rowids(tokens, group_of, nrows=groups)
        longest = tf.reduce_max(lists.row_lengths())
        columns = tf.cast(longest + -longest % TOP_K_BLOCK, tf.int32)
        padded = lists.to_tensor(default_value=-1, shape=tf.stack([groups, columns]))
        last = tf.gather(tokens, tf.cast(lists.row_limits() - 1, tf.int32))  # every row holds the reserved tokens
        vocabulary = tf.where(padded < 0, last[:, None], padded)
        vocabulary.set_shape([groups, None])
        return vocabulary, sentence_groups

    def sentence_mask(self, input_ids, vocabulary, sentence_groups, extra_ids=None, target_size: int | None = None):
        """bool [B, V']: which of its group's `vocabulary` columns are in each sentence's own
        shortlist (the reserved, the frequent and its source ids' candidates). Searching each
        sentence over its own shortlist, not its group's, makes its output independent of its
        batch."""
        import tensorflow as tf

        width = self._width(target_size)
        listed = _indicator(self._candidates_of(input_ids, extra_ids), width) | _indicator(self._always(), width)[None, :]
        first_column_of_its_token = tf.concat(  # not a padding one
            [tf.ones_like(vocabulary[:, :1], tf.bool), vocabulary[:, 1:] > vocabulary[:, :-1]], axis=1)
        columns = tf.gather(vocabulary, sentence_groups)
        return tf.gather(listed, columns, batch_dims=1) & tf.gather(first_column_of_its_token, sentence_groups)

    def _width(self, target_size: int | None = None) -> int:
        """One more than the largest token id the shortlist can name (`target_size`: the target
        vocabulary's, where extra ids may name any)."""
        return target_size or int(max(self.candidates.max(initial=0), self.frequent.max(initial=0), NUM_RESERVED - 1)) + 1

    def _always(self):
        import tensorflow as tf

        return tf.concat([tf.range(NUM_RESERVED, dtype=tf.int32), tf.constant(self.frequent)], axis=0)

    def _candidates_of(self, input_ids, extra_ids=None):
        """int32 [B, S * K (+ E)]: the candidates of each sentence's source ids (and its `extra_ids`)."""
        import tensorflow as tf

        candidates = tf.gather(tf.constant(self.candidates), tf.cast(input_ids, tf.int32))
        candidates = tf.reshape(candidates, [tf.shape(input_ids)[0], -1])
        if extra_ids is None:
            return candidates
        return tf.concat([candidates, tf.cast(extra_ids, tf.int32)], axis=1)

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


def load_run_shortlist(run_dir) -> Shortlist:
    """The `Shortlist` a trainer wrote into a run dir (`RunDir.shortlist_path`); a UsageError if there is none."""
    from t2t_keras import files
    from t2t_keras.errors import UsageError

    if not files.isfile(run_dir.shortlist_path):
        raise UsageError(
            f"{run_dir.shortlist_path} is missing (runs trained before shortlists existed have none): rerun the "
            "run's t2t-keras-trainer command (it writes the file from --data_dir and trains no further) and copy "
            "it into averaged or best directories, or decode with shortlist=0."
        )
    return Shortlist.load(run_dir.shortlist_path)


def _indicator(ids, width: int):
    """bool [..., width]: which of 0..width-1 are among the last axis of `ids` ([N] or [B, N])."""
    import tensorflow as tf

    return tf.math.bincount(ids, minlength=width, maxlength=width, binary_output=True, axis=-1 if ids.shape.rank == 2 else None) > 0


def _merged_counts(keys: list[np.ndarray], counts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sparse counts (ascending keys, their counts) summed over the (keys, counts) given."""
    keys, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    return keys, np.bincount(inverse, weights=np.concatenate(counts)).astype(np.int64)


def _flat(rows) -> tuple[np.ndarray, np.ndarray]:
    """Id lists as (values, row splits)."""
    lengths = np.array([len(row) for row in rows], np.int64)
    values = np.concatenate([np.asarray(row, np.int64) for row in rows]) if len(rows) else np.zeros(0, np.int64)
    return values, np.concatenate([[0], np.cumsum(lengths)])


def _distinct_per_row(values, splits, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distinct values, ascending: (values, row splits) again."""
    rows = np.repeat(np.arange(len(splits) - 1, dtype=np.int64), np.diff(splits))
    keys = np.unique(rows * width + np.asarray(values, np.int64))
    return keys % width, np.searchsorted(keys // width, np.arange(len(splits)))


def _cross_products(source_values, source_splits, target_values, target_splits, target_width: int) -> np.ndarray:
    """source * target_width + target for every (source, target) of the same row."""
    targets_per_row = np.diff(target_splits)
    row_of_source = np.repeat(np.arange(len(source_splits) - 1), np.diff(source_splits))
    repeats = targets_per_row[row_of_source]  # each source value meets its row's targets
    group_starts = np.cumsum(repeats) - repeats
    within = np.arange(repeats.sum()) - np.repeat(group_starts, repeats)
    target_index = np.repeat(target_splits[:-1][row_of_source], repeats) + within
    return np.repeat(source_values, repeats) * target_width + target_values[target_index]

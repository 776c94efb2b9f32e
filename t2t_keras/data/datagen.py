"""Datagen: a problem's text -> SentencePiece vocabulary (or one per side) + TFRecord shards in data_dir.

Deterministic (the same input gives byte-identical files) and restartable: every file is
written under a temporary name and renamed when complete, and the manifest comes last, so
an interrupted run leaves nothing that looks finished and a rerun produces the same files.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import zlib
from typing import Iterable, Iterator

import numpy as np
import tqdm

from t2t_keras import files, locks
from t2t_keras.data import manifest, tfrecords
from t2t_keras.data import word_alignments as word_alignments_lib
from t2t_keras.data.text_files import TextStats
from t2t_keras.data.tokenizers import Vocabularies, Vocabulary, train_sentencepiece
from t2t_keras.errors import UsageError

PERCENTILES = (50, 90, 99, 100)
MAX_LISTED_LINES = 20
DEFAULT_SHUFFLE_BUFFER = 1_000_000  # pairs held in memory while shuffling a split (~200 bytes each)
SPILL_FILES = 64  # a split larger than the buffer is dealt into this many temporary files first


def generate(problem, data_dir: str, tmp_dir: str, overwrite: bool = False, progress: bool = True,
             vocabularies: Vocabularies | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
             word_alignments: bool = False) -> dict:
    """Writes the problem's vocabularies and shards into `data_dir`; returns the manifest.

    `vocabularies` (see `tokenizers.given_vocabularies`) are used as they are instead of training new
    ones. Each split's pairs are written in a seeded random order (`shuffle_pairs`, holding
    at most `shuffle_buffer` pairs in memory), so corpora concatenated in a file are mixed.
    With `word_alignments`, each pair also holds its piece links (`data.word_alignments`: eflomal
    over all splits' pairs at once, before anything is written), for guided alignment.
    A complete data_dir made the same way is reused (returned with "reused": True) unless
    `overwrite`; one made another way is a UsageError. A failure while writing removes every
    file this call added (Ctrl-C keeps the finished ones, for a rerun to continue).
    """
    files.ensure_writable_dir(data_dir, "--data_dir")
    with locks.holding(os.path.join(data_dir, locks.LOCK_FILE), "--data_dir", data_dir):  # one datagen at a time
        return _generate_unlocked(problem, data_dir, tmp_dir, overwrite, progress, vocabularies, shuffle_buffer,
                                  word_alignments)


def _generate_unlocked(problem, data_dir: str, tmp_dir: str, overwrite: bool, progress: bool,
                       vocabularies: Vocabularies | None, shuffle_buffer: int, word_alignments: bool) -> dict:
    files.remove_incomplete(data_dir, problem.name)  # what a killed run left, even beside complete data
    if not overwrite:
        manifest.check_splits(problem, data_dir)  # an older version's splits: redone only when asked
    if not overwrite and manifest.is_complete(problem, data_dir):
        record = manifest.load(problem, data_dir)
        _check_same_recipe(problem, data_dir, record, vocabularies, word_alignments)
        return {**record, "reused": True}
    before = set(files.listdir(data_dir)) | {locks.LOCK_FILE}
    try:
        return _generate(problem, data_dir, tmp_dir, overwrite, progress, vocabularies, shuffle_buffer, word_alignments)
    except Exception:  # a failure found while writing (a bad line, a truncated file): the data_dir as it was
        for name in set(files.listdir(data_dir)) - before:
            files.remove(os.path.join(data_dir, name))
        raise


def _generate(problem, data_dir: str, tmp_dir: str, overwrite: bool, progress: bool, vocabularies: Vocabularies | None,
              shuffle_buffer: int, word_alignments: bool) -> dict:
    given = vocabularies is not None
    links = _word_links(problem, tmp_dir) if word_alignments else {}  # first: a missing extra stops before any write
    if given:
        _check_given_vocabularies(problem, vocabularies)
        source = _write_vocabulary(vocabularies.source, problem.vocab_path(data_dir))
        target = source if problem.shared_vocabulary else _write_vocabulary(vocabularies.target, problem.vocab_path(data_dir, "target"))
    elif problem.shared_vocabulary:
        source = target = _vocabulary(problem, "both", data_dir, tmp_dir, overwrite)
    else:
        source = _vocabulary(problem, "source", data_dir, tmp_dir, overwrite)
        target = _vocabulary(problem, "target", data_dir, tmp_dir, overwrite)
    vocabularies = Vocabularies(source, target)
    record = {"vocab": _vocab_record(source), "splits": {}, "vocab_given": given}
    if not problem.shared_vocabulary:
        record["target_vocab"] = _vocab_record(target)
    if problem.settings:
        record["settings"] = problem.settings
    if word_alignments:
        record["word_alignments"] = word_alignments_lib.METHOD
    for split in problem.splits:
        record["splits"][split] = _write_split(problem, split, vocabularies, data_dir, tmp_dir, progress, shuffle_buffer,
                                               links.get(split))
    record["eval_files"] = [os.path.basename(path) for path in problem.write_eval_files(data_dir, tmp_dir)]
    manifest.write(problem, data_dir, record)
    return manifest.load(problem, data_dir)


def _check_given_vocabularies(problem, vocabularies: Vocabularies) -> None:
    if problem.shared_vocabulary and not vocabularies.shared:
        raise UsageError(
            f"--vocab_model names two models, but {problem.name} shares one vocabulary between source and target"
            + (" (add --separate_vocabularies)." if "separate_vocabularies" in problem.datagen_flags else ".")
        )
    if not problem.shared_vocabulary and vocabularies.shared:
        raise UsageError(f"--vocab_model names one model, but {problem.name} has a vocabulary per side: give source,target.")


def _write_vocabulary(vocabulary: Vocabulary, path: str) -> Vocabulary:
    files.write_atomically(path, vocabulary.model_proto)
    return Vocabulary(vocabulary.model_proto, path)


def _word_links(problem, tmp_dir: str) -> dict[str, list]:
    """Each split's word links, pair by pair (its non-blank pairs, as `_write_split` reads them):
    one eflomal run over all splits' pairs together, so that the small ones align as well as train."""
    pairs = {split: [pair for pair in problem.text_pairs(split, tmp_dir, TextStats()) if pair[0].strip() and pair[1].strip()]
             for split in problem.splits}
    links = iter(word_alignments_lib.word_links([pair for split in problem.splits for pair in pairs[split]]))
    return {split: [next(links) for _ in pairs[split]] for split in problem.splits}


def _check_same_recipe(problem, data_dir: str, record: dict, vocabularies: Vocabularies | None,
                       word_alignments: bool = False) -> None:
    """A complete data_dir is reused only if made from the same settings and vocabularies (and
    with word alignments if they are asked for)."""
    redo = f"use --overwrite to regenerate it, or another --data_dir"
    if word_alignments and not record.get("word_alignments"):
        raise UsageError(f"--data_dir={data_dir} holds {problem.name} data without word alignments; {redo}.")
    if record.get("settings", {}) != problem.settings:
        changed = sorted(key for key in {*record.get("settings", {}), *problem.settings}
                         if record.get("settings", {}).get(key) != problem.settings.get(key))
        raise UsageError(f"--data_dir={data_dir} holds {problem.name} data made with other {', '.join(changed)}; {redo}.")
    if vocabularies is not None:
        recorded = [record["vocab"]["sha256"], record.get("target_vocab", record["vocab"])["sha256"]]
        if recorded != [vocabularies.source.sha256, vocabularies.target.sha256]:
            raise UsageError(f"--data_dir={data_dir} holds {problem.name} data encoded with another vocabulary than --vocab_model; {redo}.")


def _vocabulary(problem, side: str, data_dir: str, tmp_dir: str, overwrite: bool) -> Vocabulary:
    """The vocabulary of `side` ("both" when shared, "source", "target"): reused if a previous
    run wrote it (atomically), else trained."""
    path = problem.vocab_path(data_dir, "target" if side == "target" else "source")
    if files.isfile(path) and not overwrite:
        return Vocabulary.load(path)
    sentences = problem.vocab_sentences(tmp_dir, side)
    if not sentences:
        raise UsageError(f"{problem.name}: the train split has no text to train a vocabulary on (check --tmp_dir={tmp_dir}).")
    spec = problem.target_vocab_spec if side == "target" else problem.vocab_spec
    model_proto = train_sentencepiece(sentences, spec.size, spec.model_type, spec.size_is_bound, spec.user_defined_symbols)
    files.write_atomically(path, model_proto)
    return Vocabulary(model_proto, path)


def _vocab_record(vocabulary: Vocabulary) -> dict:
    return {"file": os.path.basename(vocabulary.path), "sha256": vocabulary.sha256, "size": vocabulary.size}


def _write_split(problem, split: str, vocabularies: Vocabularies, data_dir: str, tmp_dir: str, progress: bool,
                 shuffle_buffer: int, links: list | None = None) -> dict:
    paths = tfrecords.shard_names(problem.shard_prefix(data_dir, split), problem.num_shards[split])
    stats = TextStats()
    dropped = collections.Counter()
    source_lengths, target_lengths = [], []
    bar = tqdm.tqdm(
        total=problem.expected_pairs(split, tmp_dir), desc=f"{problem.name} {split}", unit=" pairs",
        disable=not progress, file=sys.stderr, mininterval=1.0,
    )

    def examples():
        pair_links = iter(links) if links is not None else None
        for source, target in problem.text_pairs(split, tmp_dir, stats):
            bar.update(1)
            if not source.strip() or not target.strip():
                dropped["empty source or target"] += 1
                continue
            inputs = vocabularies.source.encode(source, add_eos=True)
            targets = vocabularies.target.encode(target, add_eos=True)
            source_lengths.append(len(inputs))
            target_lengths.append(len(targets))
            alignment = None
            if pair_links is not None:  # over the pieces without EOS
                alignment = word_alignments_lib.piece_links(next(pair_links), vocabularies.source.pieces(inputs[:-1]),
                                                            vocabularies.target.pieces(targets[:-1]))
            yield tfrecords.serialize_example(inputs, targets, alignment)

    rng = np.random.default_rng([problem.data_seed, zlib.crc32(split.encode())])
    spill_prefix = problem.shard_prefix(data_dir, split) + ".shuffle"
    pairs_per_shard = [0] * len(paths)
    with tfrecords.atomic_shard_writers(paths) as writers:
        for written, record in enumerate(shuffle_pairs(examples(), shuffle_buffer, rng, spill_prefix)):
            writers[written % len(writers)].write(record)
            pairs_per_shard[written % len(writers)] += 1
    bar.close()
    if not source_lengths:
        raise UsageError(f"{problem.name} {split}: no pairs left to write (check --tmp_dir={tmp_dir}).")
    return {
        "files": [manifest.file_record(path, count) for path, count in zip(paths, pairs_per_shard)],
        "pairs": len(source_lengths),
        "dropped": dict(sorted(dropped.items())),
        "invalid_utf8_lines": len(stats.invalid_utf8_lines),
        "invalid_utf8_examples": stats.invalid_utf8_lines[:MAX_LISTED_LINES],
        "source_length_percentiles": _percentiles(source_lengths),
        "target_length_percentiles": _percentiles(target_lengths),
    }


def shuffle_pairs(records: Iterator[bytes], buffer: int, rng: np.random.Generator, spill_prefix: str) -> Iterator[bytes]:
    """`records` in a uniformly random order (given by `rng`), with at most `buffer` of them
    in memory: a split that fits is shuffled in memory; a larger one is dealt at random into
    temporary files of about `buffer / 2` records (.incomplete.`spill_prefix`-*), each then
    shuffled in memory (or dealt again if it is still too big) and emitted in turn: a random
    subset per file, each in random order, is a uniform permutation of the whole."""
    held = list(itertools.islice(records, buffer + 1))
    if len(held) <= buffer:
        rng.shuffle(held)
        yield from held
        return

    def spilled():
        while held:  # handed on one by one, so memory holds the buffer once, not twice
            yield held.pop()
        yield from records

    yield from _shuffle_spilled(spilled(), buffer, rng, spill_prefix, SPILL_FILES)


def _shuffle_spilled(records: Iterable[bytes], buffer: int, rng: np.random.Generator, prefix: str, fan_out: int):
    paths = [files.temporary_name(f"{prefix}-{i:03d}") for i in range(fan_out)]
    counts = [0] * fan_out
    try:
        writers = [tfrecords.tf_record_writer(path) for path in paths]
        try:
            for record in records:
                slot = int(rng.integers(fan_out))
                writers[slot].write(record)
                counts[slot] += 1
        finally:
            for writer in writers:
                writer.close()
        for path, count in zip(paths, counts):
            if count <= buffer:
                held = list(tfrecords.read_records(path))
                rng.shuffle(held)
                yield from held
            else:  # unlucky or a very large split: deal this file again
                yield from _shuffle_spilled(tfrecords.read_records(path), buffer, rng, f"{prefix}-{len(paths)}-{paths.index(path):03d}",
                                            max(2, -(-2 * count // buffer)))
    finally:
        for path in paths:
            files.remove(path)


def _percentiles(lengths: list[int]) -> dict:
    values = np.percentile(np.asarray(lengths), PERCENTILES, method="lower")
    return {f"p{p}": int(v) for p, v in zip(PERCENTILES, values)}


def format_summary(record: dict) -> str:
    """The closing summary datagen prints."""
    vocabularies = " and ".join(
        f"{record[key]['file']} ({record[key]['size']} pieces)" for key in ("vocab", "target_vocab") if key in record
    )
    lines = [
        f"{record['problem']}: {'reused complete data' if record.get('reused') else 'copied --vocab_model' if record.get('vocab_given') else 'wrote'} "
        f"{'vocabularies' if 'target_vocab' in record else 'vocabulary'} {vocabularies}"
    ]
    for split, info in record["splits"].items():
        dropped = ", ".join(f"{n} {why}" for why, n in info["dropped"].items()) or "none"
        lines.append(
            f"  {split}: {info['pairs']} pairs in {len(info['files'])} shards; dropped: {dropped}; "
            f"invalid UTF-8 lines replaced: {info['invalid_utf8_lines']}"
            + (f" ({', '.join(info['invalid_utf8_examples'])})" if info["invalid_utf8_examples"] else "")
        )
        for side in ("source", "target"):
            p = info[f"{side}_length_percentiles"]
            lines.append(f"    {side} tokens p50/p90/p99/max: {p['p50']}/{p['p90']}/{p['p99']}/{p['p100']}")
    if record.get("eval_files"):
        lines.append(f"  for decoding and scoring: {', '.join(record['eval_files'])}")
    return "\n".join(lines)

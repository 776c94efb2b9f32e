"""Datagen: a problem's text -> SentencePiece vocabulary (or one per side) + TFRecord shards in data_dir.

Deterministic (the same input gives byte-identical files) and restartable: every file is
written under a temporary name and renamed when complete, and the manifest comes last, so
an interrupted run leaves nothing that looks finished and a rerun produces the same files.
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np
import tqdm

from t2t_keras import files
from t2t_keras.data import manifest, tfrecords
from t2t_keras.data.text_files import TextStats
from t2t_keras.data.tokenizers import Vocabularies, Vocabulary, train_sentencepiece
from t2t_keras.errors import UsageError

PERCENTILES = (50, 90, 99, 100)
MAX_LISTED_LINES = 20


def generate(problem, data_dir: str, tmp_dir: str, overwrite: bool = False, progress: bool = True) -> dict:
    """Writes the problem's vocabularies and shards into `data_dir`; returns the manifest.

    A complete data_dir is reused (returned as is, with "reused": True) unless `overwrite`.
    """
    files.ensure_writable_dir(data_dir, "--data_dir")
    if not overwrite and manifest.is_complete(problem, data_dir):
        return {**manifest.load(problem, data_dir), "reused": True}
    files.remove_incomplete(data_dir, problem.name)
    if problem.shared_vocabulary:
        source = target = _vocabulary(problem, "both", data_dir, tmp_dir, overwrite)
    else:
        source = _vocabulary(problem, "source", data_dir, tmp_dir, overwrite)
        target = _vocabulary(problem, "target", data_dir, tmp_dir, overwrite)
    vocabularies = Vocabularies(source, target)
    record = {"vocab": _vocab_record(source), "splits": {}}
    if not problem.shared_vocabulary:
        record["target_vocab"] = _vocab_record(target)
    for split in problem.splits:
        record["splits"][split] = _write_split(problem, split, vocabularies, data_dir, tmp_dir, progress)
    record["eval_files"] = [os.path.basename(path) for path in problem.write_eval_files(data_dir, tmp_dir)]
    manifest.write(problem, data_dir, record)
    return manifest.load(problem, data_dir)


def _vocabulary(problem, side: str, data_dir: str, tmp_dir: str, overwrite: bool) -> Vocabulary:
    """The vocabulary of `side` ("both" when shared, "source", "target"): reused if a previous
    run wrote it (atomically), else trained."""
    path = problem.vocab_path(data_dir, "target" if side == "target" else "source")
    if os.path.isfile(path) and not overwrite:
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


def _write_split(problem, split: str, vocabularies: Vocabularies, data_dir: str, tmp_dir: str, progress: bool) -> dict:
    paths = tfrecords.shard_names(problem.shard_prefix(data_dir, split), problem.num_shards[split])
    stats = TextStats()
    dropped = collections.Counter()
    source_lengths, target_lengths = [], []
    pairs_per_shard = [0] * len(paths)
    bar = tqdm.tqdm(
        total=problem.expected_pairs(split, tmp_dir), desc=f"{problem.name} {split}", unit=" pairs",
        disable=not progress, file=sys.stderr, mininterval=1.0,
    )
    with tfrecords.atomic_shard_writers(paths) as writers:
        for source, target in problem.text_pairs(split, tmp_dir, stats):
            bar.update(1)
            if not source.strip() or not target.strip():
                dropped["empty source or target"] += 1
                continue
            inputs = vocabularies.source.encode(source, add_eos=True)
            targets = vocabularies.target.encode(target, add_eos=True)
            shard = len(source_lengths) % len(writers)
            writers[shard].write(tfrecords.serialize_example(inputs, targets))
            pairs_per_shard[shard] += 1
            source_lengths.append(len(inputs))
            target_lengths.append(len(targets))
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


def _percentiles(lengths: list[int]) -> dict:
    values = np.percentile(np.asarray(lengths), PERCENTILES, method="lower")
    return {f"p{p}": int(v) for p, v in zip(PERCENTILES, values)}


def format_summary(record: dict) -> str:
    """The closing summary datagen prints."""
    vocabularies = " and ".join(
        f"{record[key]['file']} ({record[key]['size']} pieces)" for key in ("vocab", "target_vocab") if key in record
    )
    lines = [
        f"{record['problem']}: {'reused complete data' if record.get('reused') else 'wrote'} "
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

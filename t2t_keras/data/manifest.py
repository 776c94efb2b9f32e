"""The manifest datagen writes last: what a complete data_dir holds, checked before reading.

`{problem}.manifest.json` lists the vocabulary, or both (with their sha256), and every shard (with its
size in bytes and number of pairs). Its presence means datagen finished; readers compare
the files against it, so a truncated shard or a replaced vocabulary is reported by name
instead of surfacing as a wrong model.
"""

from __future__ import annotations

import json
import os

from t2t_keras import files
from t2t_keras.errors import UsageError

FORMAT_VERSION = 1


def write(problem, data_dir: str, record: dict) -> None:
    """Writes the manifest atomically (temp name, then rename)."""
    path = problem.manifest_path(data_dir)
    text = json.dumps({"format_version": FORMAT_VERSION, "problem": problem.name, **record}, indent=2, sort_keys=True)
    files.write_atomically(path, text + "\n")


def load(problem, data_dir: str) -> dict:
    """The manifest, after checking the vocabulary and every shard against it."""
    fix = f"run t2t-keras-datagen --problem={problem.name} --data_dir={data_dir} first"
    if not files.isdir(data_dir):
        raise UsageError(f"--data_dir={data_dir} does not exist; {fix}.")
    path = problem.manifest_path(data_dir)
    if not files.isfile(path):
        raise UsageError(f"--data_dir={data_dir} has no complete data for {problem.name} (no {os.path.basename(path)}); {fix}.")
    manifest = files.read_json(path, f"rerun t2t-keras-datagen --problem={problem.name} --data_dir={data_dir} --overwrite.")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise UsageError(f"{path}: written by another version of t2t-keras; rerun t2t-keras-datagen with --overwrite.")
    _check_splits(problem, data_dir, manifest)
    vocabularies = {"vocab": problem.vocab_path(data_dir)}
    if not problem.shared_vocabulary:
        vocabularies["target_vocab"] = problem.vocab_path(data_dir, "target")
    for key, vocab_path in vocabularies.items():
        if not files.isfile(vocab_path):
            raise UsageError(f"{vocab_path} is missing; rerun t2t-keras-datagen --problem={problem.name} with --overwrite.")
        if key not in manifest or files.sha256(vocab_path) != manifest[key]["sha256"]:
            raise UsageError(
                f"{vocab_path} does not match the vocabulary the data was encoded with; "
                "restore it or rerun t2t-keras-datagen with --overwrite."
            )
    for split in manifest["splits"].values():
        for shard in split["files"]:
            shard_path = os.path.join(data_dir, shard["name"])
            if not files.isfile(shard_path):
                raise UsageError(f"{shard_path} is missing; rerun t2t-keras-datagen with --overwrite.")
            if files.size(shard_path) != shard["bytes"]:
                raise UsageError(
                    f"{shard_path} has {files.size(shard_path)} bytes, the manifest says {shard['bytes']}: "
                    "truncated or changed; rerun t2t-keras-datagen with --overwrite."
                )
    return manifest


def is_complete(problem, data_dir: str) -> bool:
    try:
        load(problem, data_dir)
    except UsageError:
        return False
    return True


def shard_files(problem, data_dir: str, split: str) -> list[str]:
    """Paths of `split`'s shards, checked against the manifest."""
    manifest = load(problem, data_dir)
    if split not in manifest["splits"]:
        raise UsageError(f"{problem.name} has no split {split!r}; it has {', '.join(manifest['splits'])}.")
    return [os.path.join(data_dir, shard["name"]) for shard in manifest["splits"][split]["files"]]


def check_splits(problem, data_dir: str) -> None:
    """A UsageError if `data_dir` holds a manifest of `problem` with other splits than it has now
    (data an older version of the problem wrote: regenerated only when asked)."""
    path = problem.manifest_path(data_dir)
    if files.isfile(path):
        _check_splits(problem, data_dir, files.read_json(path, f"rerun t2t-keras-datagen --problem={problem.name} "
                                                               f"--data_dir={data_dir} --overwrite."))


def _check_splits(problem, data_dir: str, manifest: dict) -> None:
    if sorted(manifest.get("splits", {})) != sorted(problem.splits):
        raise UsageError(f"{problem.manifest_path(data_dir)} lists the splits {', '.join(manifest.get('splits', {}))}; "
                         f"{problem.name} now has {', '.join(problem.splits)}: rerun t2t-keras-datagen "
                         f"--problem={problem.name} --data_dir={data_dir} --overwrite.")


def file_record(path: str, pairs: int) -> dict:
    return {"name": os.path.basename(path), "bytes": files.size(path), "pairs": pairs}

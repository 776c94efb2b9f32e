"""WMT14 English-German and English-French through TensorFlow Datasets (section 5.1).

tfds downloads and prepares `wmt14_translate` into --tmp_dir on first use (train: Europarl
v7 + CommonCrawl + News Commentary v9 for de-en, plus UN and Gigaword for fr-en; dev:
newstest2013; test: newstest2014). On a machine without network, prepare it elsewhere with
`tfds build wmt14_translate/de-en --data_dir=DIR` and pass that DIR as --tmp_dir.
"""

from __future__ import annotations

import os
from typing import ClassVar, Iterator

from t2t_keras.data.text_files import TextStats
from t2t_keras.errors import UsageError
from t2t_keras.problem import VocabSpec
from t2t_keras.registry import register_problem
from t2t_keras.problems.translate import TranslateProblem

TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


class Wmt14Problem(TranslateProblem):
    """A WMT14 direction read with tfds; invalid UTF-8 in the corpus is replaced and counted."""

    tfds_name: ClassVar[str]
    num_shards = {"train": 100, "dev": 1, "test": 1}

    def _builder(self, tmp_dir: str | None):
        """The tfds builder, prepared in tmp_dir (once per instance and directory)."""
        import tensorflow_datasets as tfds

        prepared = self.__dict__.setdefault("_prepared_builders", {})
        if tmp_dir in prepared:
            return prepared[tmp_dir]
        if not tmp_dir:
            raise UsageError(f"--tmp_dir is required for {self.name}: tfds prepares {self.tfds_name} there.")
        builder = tfds.builder(self.tfds_name, data_dir=tmp_dir)
        try:
            builder.download_and_prepare(download_dir=os.path.join(tmp_dir, "downloads"))
        except Exception as e:  # tfds raises many types for a failed download
            raise UsageError(
                f"could not prepare {self.tfds_name} in --tmp_dir={tmp_dir} ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); without network, run `tfds build {self.tfds_name}` "
                "elsewhere and copy its data_dir here."
            ) from None
        prepared[tmp_dir] = builder
        return builder

    def text_pairs(self, split: str, tmp_dir: str | None, stats: TextStats) -> Iterator[tuple[str, str]]:
        import tensorflow_datasets as tfds

        dataset = self._builder(tmp_dir).as_dataset(split=TFDS_SPLITS[split], shuffle_files=False)
        for number, example in enumerate(tfds.as_numpy(dataset), start=1):
            yield (
                _decode(example[self.source_language], f"{self.tfds_name}/{split}:{number}", stats),
                _decode(example[self.target_language], f"{self.tfds_name}/{split}:{number}", stats),
            )

    def expected_pairs(self, split: str, tmp_dir: str | None) -> int | None:
        splits = self._builder(tmp_dir).info.splits
        return splits[TFDS_SPLITS[split]].num_examples if TFDS_SPLITS[split] in splits else None


def _decode(raw: bytes, where: str, stats: TextStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8_lines.append(where)
        return raw.decode("utf-8", errors="replace")


@register_problem()
class TranslateEndeWmt14(Wmt14Problem):
    """WMT14 English -> German, shared 37000-piece BPE vocabulary (the paper's en-de)."""

    name = "translate_ende_wmt14"
    tfds_name = "wmt14_translate/de-en"
    source_language, target_language = "en", "de"
    vocab_spec = VocabSpec(size=37000)


@register_problem()
class TranslateEnfrWmt14(Wmt14Problem):
    """WMT14 English -> French, shared 32000-piece vocabulary (the paper's en-fr)."""

    name = "translate_enfr_wmt14"
    tfds_name = "wmt14_translate/fr-en"
    source_language, target_language = "en", "fr"
    vocab_spec = VocabSpec(size=32000)

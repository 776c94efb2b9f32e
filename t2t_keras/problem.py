"""Problem: a registered task = where its text comes from + its vocabulary + its splits.

A problem turns raw text into (source, target) string pairs (`text_pairs`); everything
after that is shared: `t2t-keras-datagen` trains the SentencePiece vocabulary and writes
TFRecord shards into data_dir, and `dataset()` reads them back as token-budget batches.

Files in data_dir, all prefixed with the problem's name:
  {name}.spm.model                     the SentencePiece vocabulary (shared, or the source's)
  {name}.target.spm.model              the target's, for a problem with `target_vocab_spec`
  {name}-{split}-00000-of-0000N        TFRecord shards of tf.train.Example {inputs, targets}
  {name}.manifest.json                 written last: what a complete data_dir holds
"""

from __future__ import annotations

import abc
import dataclasses
import os
import random
from typing import ClassVar, Iterator

from t2t_keras.data.text_files import TextStats
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams, apply_overrides, replace_fields


@dataclasses.dataclass(frozen=True)
class VocabSpec:
    """How the problem's SentencePiece vocabulary is trained."""

    size: int  # pieces (for model_type "word": at most this many words)
    model_type: str = "bpe"  # or "unigram", or "word" (whole words, e.g. a closed set of symbols)
    size_is_bound: bool = False  # `size` is at most (a small corpus gets fewer pieces), not exactly
    user_defined_symbols: tuple = ()  # pieces always kept whole (SentencePiece's user_defined_symbols)
    sample_pairs: int = 1_000_000  # training pairs sampled (both sides, or the vocabulary's side)
    seed: int = 1234


class Problem(abc.ABC):
    """Base of every problem. Subclasses set `name`, `vocab_spec`, `num_shards` and `text_pairs`.

    One vocabulary is shared by sources and targets unless `target_vocab_spec` is set: then
    `vocab_spec` is trained on the sources alone and `target_vocab_spec` on the targets (the
    model then needs shared_embedding_and_softmax_weights=false).
    """

    name: ClassVar[str]
    vocab_spec: ClassVar[VocabSpec]
    target_vocab_spec: ClassVar[VocabSpec | None] = None
    num_shards: ClassVar[dict[str, int]] = {"train": 10, "dev": 1, "test": 1}  # split -> shards
    eval_split: ClassVar[str] = "dev"
    decode_defaults: ClassVar[DecodeHParams] = DecodeHParams()
    score_name: ClassVar[str] = "bleu"  # the name of what `score_outputs` measures (higher is better)
    data_seed: ClassVar[int] = 1234  # the order datagen writes each split's pairs in

    # --- settings: what a problem configured by datagen flags was given (translate_text's files) ---
    datagen_flags: ClassVar[tuple[str, ...]] = ()  # the t2t-keras-datagen flags that configure this problem

    def settings_from_flags(self, values: dict) -> dict:
        """`settings` from the values of `datagen_flags` (only the flags a user set)."""
        if values:
            flags = ", ".join(f"--{name}" for name in sorted(values))
            raise UsageError(f"{flags} configure --problem=translate_text; {self.name} is defined in code and takes none.")
        return {}

    @property
    def settings(self) -> dict:
        """The datagen flags this problem was configured with, as recorded in data_dir's
        manifest and the run dir's run.json; {} for a problem defined wholly in code."""
        return {}

    def configure(self, settings: dict) -> "Problem":
        """Applies recorded `settings` (from `settings` of an earlier instance); returns self.
        A problem defined wholly in code takes none."""
        if settings:
            raise UsageError(f"{self.name} takes no settings; got {', '.join(sorted(settings))}.")
        return self

    def configure_from_data_dir(self, data_dir: str) -> "Problem":
        """Applies the settings datagen recorded in `data_dir` (a UsageError if it has no data)."""
        from t2t_keras.data import manifest

        return self.configure(manifest.load(self, data_dir).get("settings", {}))

    @abc.abstractmethod
    def text_pairs(self, split: str, tmp_dir: str, stats: TextStats) -> Iterator[tuple[str, str]]:
        """(source text, target text) pairs of `split`, in a fixed order."""

    def expected_pairs(self, split: str, tmp_dir: str) -> int | None:
        """How many pairs `text_pairs` yields, if known cheaply (for the progress bar)."""
        return None

    def write_eval_files(self, data_dir: str, tmp_dir: str | None) -> list[str]:
        """Files datagen writes beside the shards for decoding and scoring (e.g. parsing's
        sentences and gold trees); their paths. None by default: translation reads text."""
        return []

    @property
    def target_languages(self) -> tuple[str, ...]:
        """The languages this problem's models translate into, where it names them. With several,
        each source starts with its target language's token (`data.target_languages`) and
        decoding asks for one (the decode setting target_language)."""
        return ()

    @property
    def multilingual(self) -> bool:
        """Whether one model of this problem translates into several languages."""
        return len(self.target_languages) > 1

    # --- decoding ---
    def decode_settings(self, overrides: str = "", flag: str = "--decode_hparams", run_defaults: dict | None = None) -> DecodeHParams:
        """How this problem's outputs are searched: `decode_defaults`, then a trained run's own
        (`run_defaults`: run.json's "decode_defaults", e.g. the alpha the trainer chose on the dev
        set), then `overrides` ("beam_size=5,alpha=1.0"), checked; an error names `flag`. The one
        place decode settings are resolved (decoder, exporter, trainer's dev score, Translator)."""
        defaults = replace_fields(self.decode_defaults, run_defaults or {}, "run.json's decode_defaults")
        return apply_overrides(defaults, overrides, flag).validated(flag)

    def postprocess_output(self, source: str, output: str) -> tuple[str, int]:
        """A decoded sentence as the decoder writes it, and how many repairs that took."""
        return output, 0

    def token_filter(self, vocabularies):
        """The `decoding.beam_search.TokenFilter` that keeps decoded outputs well-formed, or
        None (translation: any sequence is a translation)."""
        return None

    def structure_tokens(self, vocabularies) -> list[int] | None:
        """For problems whose targets copy their source in order with other tokens between the
        copies: the target ids that are not copies (EOS included). They do not advance the
        copy position that `copy_position_encoding` feeds the decoder. None: the targets are
        not copies (translation)."""
        return None

    def read_reference(self, path: str, flag: str) -> list:
        """The references for --decode_reference: one line per source line."""
        from t2t_keras.data.text_files import read_lines

        return list(read_lines(path, TextStats(), flag))

    def score_outputs(self, outputs: list[str], references: list):
        """The problem's score of postprocessed outputs against `read_reference`'s references,
        an `evaluation.bleu.Score`: detokenised sacreBLEU here. The trainer's dev score and the
        decoder's --decode_reference line both come from here."""
        from t2t_keras.evaluation.bleu import sacre_bleu_score

        return sacre_bleu_score(outputs, references)

    def dev_examples(self, data_dir: str, count: int) -> tuple[list[str], list]:
        """The first `count` pairs of the eval split: (source texts, references as
        `score_outputs` takes them), for the trainer's dev score. Here: the shards' pairs,
        detokenised."""
        import tensorflow as tf

        from t2t_keras.data import manifest
        from t2t_keras.data.tfrecords import parse_examples

        vocabularies = self.load_vocabularies(data_dir)
        files = manifest.shard_files(self, data_dir, self.eval_split)
        block = next(iter(tf.data.TFRecordDataset(files).take(count).batch(count)))
        inputs, targets = parse_examples(block)
        return (
            [vocabularies.source.decode(ids) for ids in inputs.to_list()],
            [vocabularies.target.decode(ids) for ids in targets.to_list()],
        )

    @property
    def splits(self) -> list[str]:
        return list(self.num_shards)

    @property
    def shared_vocabulary(self) -> bool:
        return self.target_vocab_spec is None

    def vocab_sentences(self, tmp_dir: str, side: str = "both") -> list[str]:
        """A bounded, deterministic sample of training text to train a vocabulary on:
        reservoir-sampled pairs, both sides ("both") or one ("source", "target")."""
        spec = self.target_vocab_spec if side == "target" else self.vocab_spec
        rng = random.Random(spec.seed)
        reservoir: list[tuple[str, str]] = []
        for seen, pair in enumerate(self.text_pairs("train", tmp_dir, TextStats())):
            if seen < spec.sample_pairs:
                reservoir.append(pair)
            else:
                slot = rng.randrange(seen + 1)
                if slot < spec.sample_pairs:
                    reservoir[slot] = pair
        sides = {"both": (0, 1), "source": (0,), "target": (1,)}[side]
        return [pair[i] for pair in reservoir for i in sides if pair[i].strip()]

    # --- files in data_dir ---
    def vocab_path(self, data_dir: str, side: str = "source") -> str:
        """The vocabulary file of `side` ("source" or "target"; the same file when shared)."""
        if side == "target" and not self.shared_vocabulary:
            return os.path.join(data_dir, f"{self.name}.target.spm.model")
        return os.path.join(data_dir, f"{self.name}.spm.model")

    def manifest_path(self, data_dir: str) -> str:
        return os.path.join(data_dir, f"{self.name}.manifest.json")

    def shard_prefix(self, data_dir: str, split: str) -> str:
        return os.path.join(data_dir, f"{self.name}-{split}")

    # --- reading ---
    def load_vocabularies(self, data_dir: str):
        """The problem's `Vocabularies` (source, target) from a complete data_dir (UsageError otherwise)."""
        from t2t_keras.data import manifest
        from t2t_keras.data.tokenizers import Vocabularies, Vocabulary

        manifest.load(self, data_dir)
        source = Vocabulary.load(self.vocab_path(data_dir))
        return Vocabularies(source, source if self.shared_vocabulary else Vocabulary.load(self.vocab_path(data_dir, "target")))

    def check_alignments(self, data_dir: str) -> None:
        """A one-line UsageError unless datagen stored word alignments in `data_dir`."""
        from t2t_keras.data import manifest

        if not manifest.load(self, data_dir).get("word_alignments"):
            raise UsageError(f"--data_dir={data_dir} holds no word alignments, which guided alignment learns from: "
                             f"rerun t2t-keras-datagen --problem={self.name} with --word_alignments into another --data_dir.")

    def dataset(self, split: str, data_dir: str, tokens_per_batch: int, training: bool, max_length: int = 0,
                input_context=None, seed: int | None = None, subword_sampling: float = 0.0, alignments: bool = False):
        """Batches {"inputs": [B, S], "targets": [B, T]} int32 (0-padded, EOS-terminated).

        Args:
          split: one of `splits`.
          data_dir: where datagen wrote the problem's files.
          tokens_per_batch: per replica: sentences x padded length stays within it.
          training: shuffle, repeat, and drop pairs longer than `max_length`; otherwise one
            pass in a deterministic order.
          max_length: longest pair kept in training, in tokens (0 = tokens_per_batch).
          input_context: a tf.distribute.InputContext, to read this pipeline's share.
          seed: shuffle seed.
          subword_sampling: in training, each pair's text segmented anew at every read by the
            vocabularies' sampling with this alpha (the `subword_sampling` hparam); 0: as written.
          alignments: batches also hold "alignment", each pair's piece links (guided alignment;
            data written by datagen --word_alignments).
        """
        from t2t_keras.data import manifest, pipeline

        files = manifest.shard_files(self, data_dir, split)
        if alignments:
            self.check_alignments(data_dir)
        resegmenters = None
        if training and subword_sampling:
            resegmenters = tuple(vocabulary.sampled_resegmenter(subword_sampling)
                                 for vocabulary in self.load_vocabularies(data_dir))
        return pipeline.batched_dataset(
            files, tokens_per_batch, training=training, max_length=max_length, input_context=input_context, seed=seed,
            resegmenters=resegmenters, alignments=alignments,
        )

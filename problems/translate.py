"""Translation problems: a direction (source -> target language) over parallel text."""

from __future__ import annotations

import os
from typing import ClassVar, Iterator

from t2t_keras import files
from t2t_keras.data import target_languages
from t2t_keras.data.text_files import TextStats, read_lines, read_parallel
from t2t_keras.errors import UsageError
from t2t_keras.problem import Problem


class TranslateProblem(Problem):
    """Translation from `source_language` to `target_language` with one shared vocabulary."""

    source_language: ClassVar[str]
    target_language: ClassVar[str]

    @property
    def target_languages(self) -> tuple[str, ...]:
        return (self.target_language,) if self.target_language else ()


class MultilingualProblem(TranslateProblem):
    """Several directions in one model over one shared vocabulary: each source starts with its
    target language's token (`data.target_languages`), so `vocab_spec` must keep those tokens
    whole (`user_defined_symbols=language_tokens(...)`). Subclasses set `directions` and
    `direction_pairs`."""

    source_language = target_language = ""  # one per direction
    directions: ClassVar[tuple[tuple[str, str], ...]]  # (source language, target language) of each direction

    @property
    def target_languages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(target for _, target in self.directions))

    def direction_pairs(self, split: str, tmp_dir: str | None, stats: TextStats, source: str,
                        target: str) -> Iterator[tuple[str, str]]:
        """(source text, target text) pairs of `split` in the direction source -> target."""
        raise NotImplementedError

    def text_pairs(self, split: str, tmp_dir: str | None, stats: TextStats) -> Iterator[tuple[str, str]]:
        for source, target in self.directions:
            for source_text, target_text in self.direction_pairs(split, tmp_dir, stats, source, target):
                yield target_languages.tagged(source_text, target), target_text


def language_tokens(languages) -> tuple[str, ...]:
    """The vocabulary's user_defined_symbols of a multilingual problem into `languages`."""
    return tuple(target_languages.token(language) for language in languages)


class ParallelTextProblem(TranslateProblem):
    """Translation over line-aligned text files, one pair of files per split.

    `files` maps a split to (source file, target file), relative to `text_dir` (by default
    --tmp_dir); plain or .gz. Register your own corpus like this (in a module loaded with
    --t2t_usr_dir, see WORKSPACE.md):

        @register_problem()
        class TranslateEndeMyCorpus(ParallelTextProblem):
            name = "translate_ende_my_corpus"
            source_language, target_language = "en", "de"
            vocab_spec = VocabSpec(size=8000)
            num_shards = {"train": 4, "dev": 1}
            files = {"train": ("train.en", "train.de"), "dev": ("dev.en", "dev.de")}
    """

    files: ClassVar[dict[str, tuple[str, str]]]

    def text_dir(self, tmp_dir: str | None) -> str:
        """Where `files` are; --tmp_dir unless the problem ships its text."""
        if not tmp_dir:
            raise UsageError(f"--tmp_dir is required for {self.name}: it reads {', '.join(self.files['train'])} from there.")
        return tmp_dir

    def _paths(self, split: str, tmp_dir: str | None) -> tuple[str, str]:
        directory = self.text_dir(tmp_dir)
        source, target = self.files[split]
        return os.path.join(directory, source), os.path.join(directory, target)

    def text_pairs(self, split: str, tmp_dir: str | None, stats: TextStats) -> Iterator[tuple[str, str]]:
        return read_parallel(*self._paths(split, tmp_dir), stats)

    def expected_pairs(self, split: str, tmp_dir: str | None) -> int | None:
        source, _ = self._paths(split, tmp_dir)
        if not files.isfile(source):
            return None
        return sum(1 for _ in read_lines(source, TextStats()))

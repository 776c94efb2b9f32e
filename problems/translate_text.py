"""translate_text: a user's own parallel text files, named by datagen flags, no Python.

    t2t-keras-datagen --problem=translate_text --data_dir=DIR \
        --train_source=europarl.en.gz,news.en --train_target=europarl.de.gz,news.de \
        --dev_source=dev.en --dev_target=dev.de [--vocab_size=8000] [--separate_vocabularies]
    t2t-keras-trainer --problem=translate_text --data_dir=DIR --hparams_set=transformer_base --output_dir=RUN

Each FILES flag is a comma-separated list of paths or globs (a glob's matches in name
order), plain or .gz; source and target files pair in the order given. One model of several
directions: --train_lang_pairs=en-de,de-en (and --dev_lang_pairs) name each file pair's
languages; with several target languages, each source starts with its target's token (>>de<<). The expanded
settings are recorded in data_dir's manifest and in every run dir trained on it, so the
trainer, decoder, exporter and Translator need nothing but --data_dir or --output_dir.
"""

from __future__ import annotations

import glob
import os
from typing import Iterator

from t2t_keras import files
from t2t_keras.data import target_languages
from t2t_keras.data.text_files import TextStats, check_text_file, read_lines, read_parallel
from t2t_keras.errors import UsageError
from t2t_keras.problem import VocabSpec
from t2t_keras.problems.translate import TranslateProblem, language_tokens
from t2t_keras.registry import register_problem

SPLIT_FLAGS = {"train": ("train_source", "train_target"), "dev": ("dev_source", "dev_target")}
DEFAULT_VOCAB_SIZE = 8000
LANG_PAIRS = ("train_lang_pairs", "dev_lang_pairs")  # settings recorded only when given (older records lack them)


@register_problem()
class TranslateText(TranslateProblem):
    """Your own parallel text files, named by t2t-keras-datagen flags (--train_source,
    --train_target, --dev_source, --dev_target: comma-separated paths or globs, plain or
    .gz; --vocab_size, --separate_vocabularies, --source_language, --target_language,
    --train_lang_pairs and --dev_lang_pairs for several directions, --vocab_model). Nothing to
    write in Python: the settings are recorded in data_dir and every run dir trained on it."""

    name = "translate_text"
    num_shards = {"train": 10, "dev": 1}
    datagen_flags = (*SPLIT_FLAGS["train"], *SPLIT_FLAGS["dev"], "vocab_size", "separate_vocabularies",
                     "source_language", "target_language", *LANG_PAIRS)

    def __init__(self):
        self._settings: dict = {}

    # --- settings ---
    def settings_from_flags(self, values: dict) -> dict:
        """The recorded form of datagen's flag values: every glob expanded to absolute paths."""
        missing = [f"--{flag}" for pair in SPLIT_FLAGS.values() for flag in pair if not values.get(flag)]
        if missing:
            raise UsageError(
                f"--problem=translate_text needs {', '.join(missing)}: comma-separated text files (or globs), "
                "source and target aligned line by line."
            )
        settings = {
            split: _paired_files(values[source_flag], values[target_flag], source_flag, target_flag)
            for split, (source_flag, target_flag) in SPLIT_FLAGS.items()
        }
        vocab_size = values.get("vocab_size") or DEFAULT_VOCAB_SIZE
        if vocab_size < 16:
            raise UsageError(f"--vocab_size={vocab_size}: choose at least 16 pieces (8000 suits a corpus of ~100K pairs).")
        settings.update(
            vocab_size=int(vocab_size),
            separate_vocabularies=bool(values.get("separate_vocabularies")),
            source_language=values.get("source_language") or "",
            target_language=values.get("target_language") or "",
        )
        settings.update(_lang_pairs(values, settings))
        return settings

    @property
    def settings(self) -> dict:
        return dict(self._settings)

    def configure(self, settings: dict) -> "TranslateText":
        expected = {"train", "dev", "vocab_size", "separate_vocabularies", "source_language", "target_language"}
        if settings and set(settings) - set(LANG_PAIRS) != expected:
            raise UsageError(f"translate_text settings must have {', '.join(sorted(expected))}; got {', '.join(sorted(settings))}.")
        self._settings = dict(settings)
        return self

    def _setting(self, key: str):
        if not self._settings:
            raise UsageError(
                "translate_text is configured by t2t-keras-datagen's flags (--train_source, --train_target, "
                "--dev_source, --dev_target); pass them to datagen, then give the trainer its --data_dir."
            )
        return self._settings[key]

    # --- what TranslateProblem and Problem read ---
    @property
    def source_language(self) -> str:
        return self._settings.get("source_language", "")

    @property
    def target_language(self) -> str:
        return self._settings.get("target_language", "")

    @property
    def target_languages(self) -> tuple[str, ...]:
        pairs = self._settings.get("train_lang_pairs")
        if pairs:
            return tuple(dict.fromkeys(target for _, target in pairs))
        return super().target_languages

    @property
    def vocab_spec(self) -> VocabSpec:
        # An upper bound: a small corpus gets the pieces it has instead of SentencePiece's error.
        tokens = language_tokens(self.target_languages) if self.multilingual else ()
        return VocabSpec(size=self._setting("vocab_size"), size_is_bound=True, user_defined_symbols=tokens)

    @property
    def target_vocab_spec(self) -> VocabSpec | None:
        return self.vocab_spec if self._settings.get("separate_vocabularies") else None

    def text_pairs(self, split: str, tmp_dir: str | None, stats: TextStats) -> Iterator[tuple[str, str]]:
        pairs = self._settings.get(f"{split}_lang_pairs") if self.multilingual else None
        for number, (source, target) in enumerate(self._setting(split)):
            if pairs:  # each source after its target language's token
                language = pairs[number][1]
                for source_text, target_text in read_parallel(source, target, stats, strict=True):
                    yield target_languages.tagged(source_text, language), target_text
            else:
                yield from read_parallel(source, target, stats, strict=True)

    def expected_pairs(self, split: str, tmp_dir: str | None) -> int | None:
        return sum(sum(1 for _ in read_lines(source, TextStats())) for source, _ in self._setting(split))

    def score_outputs(self, outputs: list[str], references: list):
        from t2t_keras.evaluation.bleu import sacre_bleu_score

        return sacre_bleu_score(outputs, references, language=self.target_language)


def _lang_pairs(values: dict, settings: dict) -> dict:
    """The recorded --train_lang_pairs / --dev_lang_pairs: [[source, target], ...], one per file
    pair of the split, checked (none: {})."""
    given = {flag: values.get(flag) for flag in LANG_PAIRS if values.get(flag)}
    if not given:
        return {}
    if values.get("source_language") or values.get("target_language"):
        raise UsageError("--train_lang_pairs names each file pair's languages: leave out --source_language and "
                         "--target_language.")
    if len(given) == 1:
        missing = next(flag for flag in LANG_PAIRS if flag not in given)
        raise UsageError(f"--{missing} is needed with --{next(iter(given))}: each split's file pairs have their "
                         "languages, e.g. en-de,de-en.")
    recorded = {}
    for flag, value in given.items():
        split = flag.split("_")[0]
        pairs = []
        for item in (part.strip() for part in value.split(",")):
            source, dash, target = item.partition("-")
            if not dash or not source or not target:
                raise UsageError(f"--{flag}: {item!r} is not SOURCE-TARGET; give each file pair's languages as en-de.")
            pairs.append(target_languages.checked_codes([source, target], f"--{flag}"))
        if len(pairs) != len(settings[split]):
            raise UsageError(f"--{flag} names {len(pairs)} language pairs and --{split}_source {len(settings[split])} "
                             "files; give one pair per file, in order.")
        recorded[flag] = pairs
    unknown = sorted({t for _, t in recorded["dev_lang_pairs"]} - {t for _, t in recorded["train_lang_pairs"]})
    if unknown:
        raise UsageError(f"--dev_lang_pairs asks for {', '.join(unknown)}, which no --train_lang_pairs pair translates into.")
    return recorded


def _paired_files(source_value: str, target_value: str, source_flag: str, target_flag: str) -> list[list[str]]:
    sources, targets = _expand(source_value, source_flag), _expand(target_value, target_flag)
    if len(sources) != len(targets):
        raise UsageError(
            f"--{source_flag} names {len(sources)} files and --{target_flag} {len(targets)}; they pair in order, "
            "one target file per source file."
        )
    for source, target in zip(sources, targets):
        if source == target:
            raise UsageError(f"--{source_flag} and --{target_flag} both name {source}; give the target side's file.")
    return [[source, target] for source, target in zip(sources, targets)]


def _expand(value: str, flag: str) -> list[str]:
    """Comma-separated paths or globs -> absolute paths, each glob's matches in name order."""
    paths = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        pattern = files.absolute(item)
        if glob.has_magic(pattern):
            matches = sorted(path for path in files.glob(pattern) if files.isfile(path))
            if not matches:
                raise UsageError(f"--{flag}: no file matches {item!r}.")
            paths += matches
        elif files.isdir(pattern):
            raise UsageError(f"--{flag}={item} is a directory; name its text files (a glob such as {item}/*.en works).")
        elif not files.isfile(pattern):
            raise UsageError(f"--{flag}={item}: no such file.")
        else:
            paths.append(pattern)
    if not paths:
        raise UsageError(f"--{flag} names no file.")
    for path in paths:  # before datagen writes anything
        check_text_file(path, f"--{flag}")
    return paths

"""Translator: a trained model as a Python object, the keras-hub way (the decoder CLI is built on it).

    from t2t_keras import Translator

    translator = Translator.from_preset("out/demo/train_avg")     # a run dir, or an export dir
    translator.generate(["A dog runs in the snow."])              # ['Ein Hund rennt im Schnee.']
    translator.generate(texts, beam_size=8, alpha=1.5, batch_size=32, progress=True)
    translator.translate(texts, n_best=4, log_probs=True)         # [[Hypothesis(text, log_prob, score), ...], ...]
    for hypotheses in translator.translate_iter(open("mono.en")): ...   # lazily, a window of lines at a time
    translator.score(["A dog runs."], ["Ein Hund rennt."])        # [log P(target | source)]
    Translator.from_preset("both_dirs").generate(texts, target_language="de")   # a model of several target languages

Decode settings (`t2t-keras-hparams --describe_decode`) are keyword arguments of every call:
the run's defaults unless given. A run dir decodes with a `SearchModule` per distinct
setting of what its graphs fix (beam size, alpha, lengths, precision, shortlist, sampling),
each traced once and kept, so going back to earlier settings costs nothing; batch size and
reverse_weight never need a new one. An export's graphs were fixed when it was exported:
other settings are refused in one line. Outputs are in the problem's output form (a parsing
run's are trees over the input's words; an export's, the model's text).

Loading sets the process up as t2t-keras-decoder does (`tune_process`): TensorFlow's CPU ops
one thread each, a batch searched in one part per core, and freed memory kept by glibc.
"""

from __future__ import annotations

import re
import sys
from typing import Iterable, Iterator

from t2t_keras import files
from t2t_keras.decoding.file_decoding import window_lines, windows
from t2t_keras.decoding.hypothesis import Hypothesis
from t2t_keras.decoding.kernel_choices import forced_choices
from t2t_keras.decoding.trained_run import check_alpha_search
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams, replace_fields

__all__ = ["Hypothesis", "Translator"]


class Translator:
    """A trained model with its vocabularies and decode settings: `generate`, `translate`,
    `translate_iter` and `score` with per-call settings. Build with `from_preset`."""

    def __init__(self, backend):
        self._backend = backend

    @classmethod
    def from_preset(cls, path: str, *, checkpoint: str | None = None, ensemble: Iterable[str] = (),
                    reverse: str | None = None, tune_process: bool = True, **settings) -> "Translator":
        """The Translator of `path`: a trainer's run dir (or an averaged or best one: its latest
        checkpoint, or `checkpoint`), or an export dir (t2t-keras-exporter's; its highest
        version, or a version dir). `settings` become its defaults (e.g. beam_size=8).

        Run dirs only: `ensemble`, more run dirs or checkpoints decoding with it (the mean of
        their next-token probabilities; same vocabularies); `reverse`, a run dir or checkpoint
        of the other direction that reranks each sentence's beam by log P(source | output).
        `tune_process=False` leaves TensorFlow's threads and glibc's malloc as they are."""
        from t2t_keras.serving.loaded_export import LoadedExport, holds_export
        from t2t_keras.system import start_tensorflow_quietly

        if holds_export(path):
            if checkpoint or ensemble or reverse:
                raise UsageError(f"{path} is an export: checkpoint, ensemble and reverse need run dirs.")
            start_tensorflow_quietly()
            return cls(LoadedExport(path, settings))
        if not files.isfile(files.join(path, "hparams.json")):
            raise UsageError(f"{path} is neither a trainer's run dir (it has no hparams.json) nor an export "
                             "(no saved_model.pb, in it or in a numbered version); give t2t-keras-trainer's --output_dir "
                             "or t2t-keras-exporter's --export_dir.")
        from t2t_keras.decoding.trained_run import TrainedRun

        run = TrainedRun.resolve(path, settings, checkpoint, tuple(ensemble), reverse=reverse, source="from_preset")
        if not run.decode_hparams.max_input_tokens:  # as an export of the run bounds a request
            run = run.with_settings(max_input_tokens=run.run_dir.hparams().max_length)
        return cls.from_run(run, tune_process)

    @classmethod
    def from_run(cls, run, tune_process: bool = True) -> "Translator":
        """The Translator of a resolved `TrainedRun` (the decoder CLI's way in)."""
        from t2t_keras.decoding.engine import DecodingEngine
        from t2t_keras.system import start_tensorflow_quietly

        start_tensorflow_quietly()
        return cls(DecodingEngine.from_run(run, tune_process))

    @classmethod
    def from_model(cls, model, vocabularies, problem=None, *, shortlist_table=None, tune_process: bool = True,
                   **settings) -> "Translator":
        """The Translator of a Keras `Transformer` in memory (trained with `fit`, loaded from a
        .keras file) and the `Vocabularies` it was trained with (`problem.load_vocabularies(data_dir)`).
        With the `problem`, its decode defaults, constraints and output form; `settings` become the
        defaults; `shortlist_table`, a `Shortlist` (`decoding.shortlist.load_run_shortlist(run_dir)`),
        for the shortlist setting (the trainer's dev decoding passes its run's)."""
        from t2t_keras.decoding.engine import DecodingEngine

        defaults = problem.decode_settings() if problem is not None else DecodeHParams()
        return cls(DecodingEngine.from_model(model, vocabularies, problem, _replaced(defaults, settings, "from_model"),
                                             shortlist_table, tune_process))

    @property
    def settings(self) -> DecodeHParams:
        """The decode settings a call uses for what it does not give."""
        return self._backend.settings

    @property
    def problem(self):
        """The problem the model was trained on (None for an export)."""
        return self._backend.problem

    @property
    def model(self):
        """The Keras model (a run dir's; an `Ensemble` with ensemble members); None for an export."""
        return self._backend.model

    @property
    def vocabularies(self):
        """The source and target `Vocabularies` (SentencePiece models)."""
        return self._backend.vocabularies

    def search_module(self, **settings):
        """The `SearchModule` (a tf.Module of the search and scoring graphs) that decodes with
        `settings`: what a call with them runs. Not for an export (its graphs are the SavedModel's)."""
        if not hasattr(self._backend, "search_module"):
            raise UsageError("an export's graphs are its SavedModel's signatures: search_module needs a run dir or a model.")
        return self._backend.search_module(self._call_settings(None, settings, "search_module"))

    @property
    def checkpoint_paths(self) -> list[str]:
        """The checkpoints that decode (the run's first), or the export's version directory."""
        return self._backend.checkpoint_paths

    def generate(self, texts: list[str], *, prefix: list | None = None, avoid: list | None = None,
                 constraints: list | None = None, batch_size: int | None = None, progress: bool = False,
                 **settings) -> list[str]:
        """The best output of each text (an empty one for a blank text); `prefix`, `avoid` and
        `constraints` as `translate`'s."""
        texts = _checked_list(texts, "generate")
        steering = _checked_steering(len(texts), prefix, avoid, constraints, "generate")
        return [hypotheses[0].text for hypotheses in
                self._translate_iter(texts, "generate", 1, False, batch_size, progress, settings, *steering)]

    def translate(self, texts: list[str], *, n_best: int = 1, log_probs: bool = False, alignments: bool = False,
                  prefix: list | None = None, avoid: list | None = None, constraints: list | None = None,
                  batch_size: int | None = None, progress: bool = False, **settings) -> list[list[Hypothesis]]:
        """The `n_best` best `Hypothesis`es of each text, best first: text, score (what the search
        ranked by), with `log_probs` log P(text | input) (a teacher-forced pass more; else None),
        whether the text was cut to max_input_tokens (`truncated`), and with `alignments` its
        word alignment (`alignment`: (source word, target word) index pairs over whitespace
        words, read from the cross-attention of the alignment_layer setting; a pass more).

        Steering, one item per text (None: none): `prefix`, the text each output starts with
        (its pieces forced and scored; one ending inside a word, "Ein Hu", is completed by a
        piece that continues the word: "Ein Hund"); `avoid`, a list of terms (words or phrases)
        none of whose spellings may appear in the output; `constraints`, a list of terms each
        output must contain as written (dynamic beam allocation; where the maximum length
        leaves no room for them all, the hypothesis names those it lacks: `missing`). n_best
        gives the best different continuations of a prefix."""
        texts = _checked_list(texts, "translate")
        steering = _checked_steering(len(texts), prefix, avoid, constraints, "translate")
        return list(self._translate_iter(texts, "translate", n_best, log_probs, batch_size, progress, settings, *steering,
                                         alignments=alignments))

    def translate_iter(self, texts: Iterable[str], *, n_best: int = 1, log_probs: bool = False, alignments: bool = False,
                       prefix: Iterable | None = None, avoid: Iterable | None = None, constraints: Iterable | None = None,
                       batch_size: int | None = None, progress: bool = False, **settings) -> Iterator[list[Hypothesis]]:
        """`translate` for inputs read lazily (a file's lines, a generator; each text's one line
        break at its end is dropped; `prefix`, `avoid` and `constraints` likewise, an item per text): each
        text's hypotheses in input order, a window of texts (8 batches) at a time, so memory
        holds one window. With sampling, the i-th text's samples depend on the seed and i only."""
        if isinstance(texts, (str, bytes)):
            raise TypeError(_NOT_A_LIST.format(method="translate_iter"))
        steering = _checked_steering(None, prefix, avoid, constraints, "translate_iter")
        return self._translate_iter(texts, "translate_iter", n_best, log_probs, batch_size, progress, settings, *steering,
                                    alignments=alignments)

    def _translate_iter(self, texts, method: str, n_best: int, log_probs: bool, batch_size, progress: bool,
                        settings: dict, prefix=None, avoid=None, constraints=None,
                        alignments: bool = False) -> Iterator[list[Hypothesis]]:
        call = self._call_settings(batch_size, settings, method)
        translate_window = self._backend.window_translator(call, n_best, log_probs, alignments)
        bar = _bar(progress, texts)
        replaced = []
        steered = prefix is not None or avoid is not None or constraints is not None
        items = _steered_items(_checked_texts(texts, method, replaced), prefix, avoid, constraints, method)
        try:
            for numbers, window in windows(items, window_lines(call)):
                lines = [line for line, *_ in window]
                steering = {}
                if steered:
                    _, prefixes, avoids, required = (list(column) for column in zip(*window))
                    steering = {"prefixes": prefixes, "avoids": avoids, "constraints": required}
                outputs, _ = translate_window(lines, numbers, bar.update, **steering)
                yield from outputs
        finally:
            bar.close()
            _report_replaced(replaced, method)

    def window_translator(self, n_best: int = 1, log_probs: bool = False, alignments: bool = False, **settings):
        """What `translate_iter` runs on each window: (lines, line numbers, on_lines(count)) ->
        (each line's hypotheses, the repairs that made them well-formed). The decoder CLI's."""
        return self._backend.window_translator(self._call_settings(None, settings, "window_translator"), n_best, log_probs,
                                               alignments)

    def score(self, sources: list[str], targets: list[str], *, batch_size: int | None = None,
              target_language: str | None = None) -> list[float]:
        """log P(target | source) of each pair, EOS included (the SavedModel's score signature);
        0 for a blank source. `target_language`: the targets' language, for a model of several."""
        sources, targets = _checked_list(sources, "score"), _checked_list(targets, "score", "target ")
        if len(sources) != len(targets):
            raise UsageError(f"score needs as many targets as sources, got {len(targets)} and {len(sources)}.")
        replaced = []
        sources = [line for _, line in _checked_texts(sources, "score", replaced)]
        targets = [line for _, line in _checked_texts(targets, "score", replaced, "target ")]
        _report_replaced(replaced, "score")
        settings = {} if target_language is None else {"target_language": target_language}
        return self._backend.score(sources, targets, self._call_settings(batch_size, settings, "score"))

    def _call_settings(self, batch_size, settings: dict, method: str) -> DecodeHParams:
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise UsageError(f"{method}: batch_size={batch_size!r}: need an int batch_size >= 1.")
            settings = {**settings, "sentences_per_batch": batch_size}
        replaced = _replaced(self.settings, settings, method)
        check_alpha_search(self._backend.default_stop_alpha, replaced, settings, method)
        return replaced


_NOT_A_LIST = "{method} takes a list of sentences, e.g. {method}([\"A dog runs.\"]), not a string."
_SURROGATES = re.compile("[\ud800-\udfff]")


def _checked_steering(count: int | None, prefix, avoid, constraints, method: str) -> tuple:
    """(prefix, avoid, constraints) as given (None, or one item per text: lists when `count` is
    the number of texts, any iterable for translate_iter); a bare string is a TypeError, a list
    of another length one line."""
    for name, items in (("prefix", prefix), ("avoid", avoid), ("constraints", constraints)):
        if items is None:
            continue
        if isinstance(items, (str, bytes)):
            example = '["Ein Hund"]' if name == "prefix" else '[["Hund"]]'
            raise TypeError(f"{method}: {name} takes one item per text, e.g. {name}={example}, not a string.")
        if count is not None and len(items) != count:
            raise UsageError(f"{method}: {name} has {len(items)} items for {count} texts; give one per text (None for none).")
    return prefix, avoid, constraints


def _steered_items(numbered_lines, prefix, avoid, constraints, method: str):
    """(index, (line, its prefix, its avoided terms, its required terms)) of each (index, line),
    each item checked: a prefix a str without a line break, or None; terms a list of strs, or None."""
    import itertools

    prefixes = itertools.repeat(None) if prefix is None else iter(prefix)
    avoids = itertools.repeat(None) if avoid is None else iter(avoid)
    required = itertools.repeat(None) if constraints is None else iter(constraints)
    for (index, line), start, terms, needed in zip(numbered_lines, prefixes, avoids, required):
        if start is not None and (not isinstance(start, str) or "\n" in start):
            raise TypeError(f"{method}: prefix item {index} is {type(start).__name__} {start!r:.40}; give a str "
                            "of one line, or None.")
        for name, given in (("avoid", terms), ("constraints", needed)):
            if given is not None and (isinstance(given, str) or not all(isinstance(t, str) for t in given)):
                raise TypeError(f"{method}: {name} item {index} is {given!r:.60}; give a list of terms, e.g. "
                                "[\"Hund\"], or None.")
        yield index, (line, start, *(list(given) if given is not None else None for given in (terms, needed)))


def _replaced(defaults: DecodeHParams, settings: dict, method: str) -> DecodeHParams:
    """`defaults` with the settings a call gave; a bad one is one line naming it, its rule and `method`."""
    if not settings:
        return defaults
    replaced = replace_fields(defaults, settings, method)
    forced_choices(replaced.kernel_choices, method)
    return replaced


def _checked_list(texts, method: str, kind: str = ""):
    """`texts` as a list, each item a string (a TypeError naming the first that is not); a bare
    string is refused (it would be read as one sentence per character)."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(_NOT_A_LIST.format(method=method))
    texts = list(texts)
    for index, text in enumerate(texts):
        _require_string(text, index, method, kind)
    return texts


def _require_string(text, index: int, method: str, kind: str = "") -> None:
    if not isinstance(text, str):
        raise TypeError(f"{method}: {kind}item {index} is {type(text).__name__} {text!r:.40}, not a str; give one "
                        "string per sentence.")


def _checked_texts(texts, method: str, replaced: list, kind: str = "") -> Iterator[tuple[int, str]]:
    """(index, line) of each text as decoding reads it: a str (a TypeError naming the item
    otherwise), its one line break at the end dropped, none inside (a UsageError naming it:
    a sentence per item), invalid Unicode (lone surrogates, or bytes a file opened with
    errors="surrogateescape" kept) replaced by U+FFFD as t2t-keras-decoder replaces invalid
    UTF-8, its index added to `replaced`."""
    for index, text in enumerate(texts):
        _require_string(text, index, method, kind)
        line = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
        if "\n" in line:  # the one character the decoder splits a file's lines at
            raise UsageError(f"{method}: {kind}item {index} holds a line break; give one sentence per item "
                             "(split it first, e.g. with str.splitlines).")
        if _SURROGATES.search(line):
            try:  # bytes kept by surrogateescape: decoded as a file's invalid UTF-8 is
                line = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            except UnicodeEncodeError:
                line = _SURROGATES.sub("\ufffd", line)
            replaced.append(f"{kind}{index}")
        yield index, line


def _report_replaced(replaced: list, method: str) -> None:
    if replaced:
        from absl import logging

        shown = ", ".join(replaced[:20]) + (f" and {len(replaced) - 20} more" if len(replaced) > 20 else "")
        logging.warning("%s: invalid Unicode replaced by U+FFFD in item%s %s (as t2t-keras-decoder replaces invalid "
                        "UTF-8).", method, "s" if len(replaced) > 1 else "", shown)


def _bar(progress: bool, texts):
    """A progress bar on stderr (disabled unless `progress`), sized to `texts` when it has a length."""
    import tqdm

    total = len(texts) if hasattr(texts, "__len__") else None
    return tqdm.tqdm(total=total, unit=" lines", disable=not progress, file=sys.stderr, mininterval=1.0)


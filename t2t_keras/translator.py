"""Translator: a trained model as a Python object, the keras-hub way (the decoder CLI is built on it).

    from t2t_keras import Translator

    translator = Translator.from_preset("out/demo/train_avg")     # a run dir, or an export dir
    translator.generate(["A dog runs in the snow."])              # ['Ein Hund rennt im Schnee.']
    translator.generate(texts, beam_size=8, alpha=1.5, batch_size=32, progress=True)
    translator.translate(texts, n_best=4, log_probs=True)         # [[Hypothesis(text, log_prob, score), ...], ...]
    for hypotheses in translator.translate_iter(open("mono.en")): ...   # lazily, a window of lines at a time
    translator.score(["A dog runs."], ["Ein Hund rennt."])        # [log P(target | source)]

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

import dataclasses
import sys
from typing import Iterable, Iterator

from t2t_keras import files
from t2t_keras.decoding.batch_decoding import Hypothesis, postprocess, require_sentence_list, score_lines, translate_lines
from t2t_keras.decoding.file_decoding import window_lines, windows
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams, replace_fields

__all__ = ["Hypothesis", "Translator"]

# Settings the graphs of a SearchModule do not fix: a call may change them without another module.
CALL_SETTINGS = ("sentences_per_batch", "batch_tokens", "reverse_weight")


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
        from t2t_keras.serving.exported_translator import ExportedModel, holds_export
        from t2t_keras.system import start_tensorflow_quietly

        if holds_export(path):
            if checkpoint or ensemble or reverse:
                raise UsageError(f"{path} is an export: checkpoint, ensemble and reverse need run dirs.")
            start_tensorflow_quietly()
            return cls(ExportedModel(path, settings))
        if not files.isfile(files.join(path, "hparams.json")):
            raise UsageError(f"{path} is neither a trainer's run dir (it has no hparams.json) nor an export "
                             "(no saved_model.pb, in it or in a numbered version); give t2t-keras-trainer's --output_dir "
                             "or t2t-keras-exporter's --export_dir.")
        from t2t_keras.decoding.trained_run import TrainedRun

        return cls.from_run(TrainedRun.resolve(path, settings, checkpoint, tuple(ensemble), reverse=reverse), tune_process)

    @classmethod
    def from_run(cls, run, tune_process: bool = True) -> "Translator":
        """The Translator of a resolved `TrainedRun` (the decoder CLI's way in)."""
        from t2t_keras.decoding.search_module import SearchModule
        from t2t_keras.system import start_tensorflow_quietly

        start_tensorflow_quietly()
        return cls(_ModelSearch(
            run.decode_hparams, run.problem, run.vocabularies, lambda precision: run.with_settings(precision=precision).restore_model(),
            token_filter=run.token_filter(), shortlists=lambda settings: run.with_settings(**dataclasses.asdict(settings)).shortlist,
            reverse=(lambda: SearchModule.from_run(run.reverse_run)) if run.reverse_run else None, checkpoint_paths=run.checkpoints,
            tune_process=tune_process,
        ))

    @classmethod
    def from_model(cls, model, vocabularies, problem=None, *, tune_process: bool = True, **settings) -> "Translator":
        """The Translator of a Keras `Transformer` in memory (trained with `fit`, loaded from a
        .keras file) and the `Vocabularies` it was trained with (`problem.load_vocabularies(data_dir)`).
        With the `problem`, its decode defaults, constraints and output form; `settings` become the defaults."""
        from t2t_keras.models.factory import in_precision
        from t2t_keras.system import decode_precision

        defaults = problem.decode_settings() if problem is not None else DecodeHParams()

        def no_shortlist(settings):
            if settings.shortlist:
                raise UsageError("shortlist needs the table a trainer's run dir holds (shortlist.npz): use from_preset(RUN_DIR).")

        return cls(_ModelSearch(
            decode_precision(replace_fields(defaults, settings, "decode settings")), problem, vocabularies,
            lambda precision: in_precision(model, precision),
            token_filter=problem.token_filter(vocabularies) if problem is not None else None, shortlists=no_shortlist,
            tune_process=tune_process,
        ))

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
        return self._backend.search_module(self._call_settings(None, settings))

    @property
    def checkpoint_paths(self) -> list[str]:
        """The checkpoints that decode (the run's first), or the export's version directory."""
        return self._backend.checkpoint_paths

    def generate(self, texts: list[str], *, batch_size: int | None = None, progress: bool = False,
                 **settings) -> list[str]:
        """The best output of each text (an empty one for a blank text)."""
        return [hypotheses[0].text for hypotheses in
                self.translate_iter(texts, batch_size=batch_size, progress=progress, **settings)]

    def translate(self, texts: list[str], *, n_best: int = 1, log_probs: bool = False, batch_size: int | None = None,
                  progress: bool = False, **settings) -> list[list[Hypothesis]]:
        """The `n_best` best `Hypothesis`es of each text, best first: text, score (what the search
        ranked by) and, with `log_probs`, log P(text | input) (a teacher-forced pass more;
        else None)."""
        require_sentence_list(texts, "translate")
        return list(self.translate_iter(texts, n_best=n_best, log_probs=log_probs, batch_size=batch_size,
                                        progress=progress, **settings))

    def translate_iter(self, texts: Iterable[str], *, n_best: int = 1, log_probs: bool = False,
                       batch_size: int | None = None, progress: bool = False, **settings) -> Iterator[list[Hypothesis]]:
        """`translate` for inputs read lazily (a file's lines, a generator): each text's
        hypotheses in input order, a window of texts (8 batches) at a time, so memory holds one
        window. With sampling, the i-th text's samples depend on the seed and i only."""
        require_sentence_list(texts, "translate_iter")
        call = self._call_settings(batch_size, settings)
        translate_window = self._backend.window_translator(call, n_best, log_probs)
        bar = _bar(progress, texts)
        try:
            for numbers, lines in windows(enumerate(line.rstrip("\n") for line in texts), window_lines(call)):
                outputs, _ = translate_window(lines, numbers, bar.update)
                yield from outputs
        finally:
            bar.close()

    def window_translator(self, n_best: int = 1, log_probs: bool = False, **settings):
        """What `translate_iter` runs on each window: (lines, line numbers, on_lines(count)) ->
        (each line's hypotheses, the repairs that made them well-formed). The decoder CLI's."""
        return self._backend.window_translator(self._call_settings(None, settings), n_best, log_probs)

    def score(self, sources: list[str], targets: list[str], *, batch_size: int | None = None) -> list[float]:
        """log P(target | source) of each pair, EOS included (the SavedModel's score signature);
        0 for a blank source."""
        require_sentence_list(sources, "score")
        require_sentence_list(targets, "score")
        if len(sources) != len(targets):
            raise UsageError(f"score needs as many targets as sources, got {len(targets)} and {len(sources)}.")
        return self._backend.score(list(sources), list(targets), self._call_settings(batch_size, {}))

    def _call_settings(self, batch_size: int | None, settings: dict) -> DecodeHParams:
        if batch_size is not None:
            settings = {**settings, "sentences_per_batch": batch_size}
        return replace_fields(self.settings, settings, "decode settings") if settings else self.settings


class _ModelSearch:
    """Decoding with a model in memory: restored once per precision (`models(precision)`), a
    SearchModule per distinct graph settings (`CALL_SETTINGS` aside), kept for later calls;
    `reverse()` makes the reverse model's module, after the process is set up for decoding."""

    def __init__(self, settings: DecodeHParams, problem, vocabularies, models, token_filter=None, shortlists=None,
                 reverse=None, checkpoint_paths=(), tune_process: bool = True):
        from t2t_keras.system import cores_for_decoding

        parts = cores_for_decoding(settings.parallel_parts, configure=tune_process)
        self.settings = dataclasses.replace(settings, parallel_parts=parts)
        self.problem, self.vocabularies, self.token_filter = problem, vocabularies, token_filter
        self.checkpoint_paths = list(checkpoint_paths)
        self._models, self._restore = {}, models
        self._shortlists = shortlists or (lambda settings: None)
        self._reverse = reverse() if reverse else None
        self._modules = {}
        self._model(self.settings.precision)  # restored now: a damaged checkpoint stops the load, not a first call

    @property
    def model(self):
        return self._model(self.settings.precision)

    def window_translator(self, settings: DecodeHParams, n_best: int, log_probs: bool):
        module = self.search_module(settings)

        def translate(lines, numbers, on_lines):
            outputs = translate_lines(module, lines, n_best, log_probs, line_numbers=numbers, on_lines=on_lines,
                                      batching=settings)
            return postprocess(self.problem, lines, outputs) if self.problem is not None else (outputs, 0)

        return translate

    def score(self, sources: list[str], targets: list[str], settings: DecodeHParams) -> list[float]:
        return score_lines(self.search_module(settings), sources, targets, batching=settings)

    def _model(self, precision: str):
        if precision not in self._models:
            self._models[precision] = self._restore(precision)
        return self._models[precision]

    def search_module(self, settings: DecodeHParams):
        """The SearchModule of `settings`, made on first use (its graphs traced at its first call)."""
        from t2t_keras.decoding.search_module import SearchModule
        from t2t_keras.system import decode_precision

        key = dataclasses.replace(settings, **{name: getattr(self.settings, name) for name in CALL_SETTINGS})
        if key not in self._modules:
            # The defaults' precision was decided with them (an export's run keeps bf16); a call's is decided here.
            decoded = key if key.precision == self.settings.precision else decode_precision(key)
            module = SearchModule(self._model(decoded.precision), self.vocabularies, decoded,
                                  self.token_filter, self.problem, self._shortlists(decoded), native_kernels=True)
            module.reverse = self._reverse
            self._modules[key] = module
        return self._modules[key]


def _bar(progress: bool, texts):
    """A progress bar on stderr (disabled unless `progress`), sized to `texts` when it has a length."""
    import tqdm

    total = len(texts) if hasattr(texts, "__len__") else None
    return tqdm.tqdm(total=total, unit=" lines", disable=not progress, file=sys.stderr, mininterval=1.0)


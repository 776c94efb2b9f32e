"""The decoding engine: the one place a search is built, for every caller.

    engine = DecodingEngine.from_run(run)      # the decoder CLI, the Python API, visualize
    engine = DecodingEngine.from_model(model, vocabularies, problem, shortlist_table=...)   # the trainer's dev decoding
    module = engine.search_module(settings)    # a SearchModule per distinct graph settings, kept
    module = export_search_module(run)         # an export's: TensorFlow's ops only

A model is restored once per precision; each distinct setting of what the graphs fix (beam
size, alpha, lengths, precision, shortlist, sampling, forced kernel choices; `CALL_SETTINGS`
aside) gets one `SearchModule`, traced on first use and kept. Its kernels are chosen here, by
`kernel_choices.choose` at the search's own sizes, once per size, and the choices are part of
the settings the engine reports (`settings.kernel_choices`). Nothing else constructs a
`SearchModule`.
"""

from __future__ import annotations

import dataclasses
import functools

from t2t_keras.data import target_languages
from t2t_keras.decoding import kernel_choices, markup
from t2t_keras.decoding.alignment import CrossAttention, attention_links
from t2t_keras.decoding.controls import Steering, TargetPieces
from t2t_keras.decoding.line_decoding import postprocess, score_lines, translate_lines
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams

# Settings the graphs of a SearchModule do not fix: a call may change them without another module.
CALL_SETTINGS = ("sentences_per_batch", "batch_tokens", "reverse_weight", "alignment_layer", "alignment_head", "markup",
                 "target_language")


class DecodingEngine:
    """Decoding with a model in memory, in this process: restored once per precision
    (`models(precision)`), a SearchModule per distinct graph settings, kept for later calls;
    `reverse()` makes the reverse model's scoring module, after the process is set up for decoding.

    `settings` are the defaults, their `kernel_choices` the ones the default module runs;
    `default_stop_alpha`, their alpha if the trainer chose it under the default stop (a call
    that asks for exact search without an alpha is refused: `trained_run.check_alpha_search`)."""

    def __init__(self, settings: DecodeHParams, problem, vocabularies, models, token_filter=None, shortlists=None,
                 reverse=None, checkpoint_paths=(), tune_process: bool = True, default_stop_alpha: float | None = None):
        from t2t_keras.system import cores_for_decoding

        parts = cores_for_decoding(settings.parallel_parts, configure=tune_process)
        self.problem, self.vocabularies, self.token_filter = problem, vocabularies, token_filter
        self.checkpoint_paths = list(checkpoint_paths)
        self.default_stop_alpha = default_stop_alpha
        self._models, self._restore = {}, models
        self._shortlists = shortlists or (lambda settings: None)
        self._reverse = reverse() if reverse else None
        self._modules, self._kernels, self._attention = {}, {}, {}
        self._asked_choices = settings.kernel_choices  # forced by the user ('' = all timed here)
        self.settings = dataclasses.replace(settings, parallel_parts=parts)
        # Restored and its kernels chosen now: a damaged checkpoint stops the load, not a first call.
        self.settings = self.search_module(self.settings).decode_hparams

    @classmethod
    def from_run(cls, run, tune_process: bool = True) -> "DecodingEngine":
        """The engine of a resolved `TrainedRun`: its checkpoints (an `Ensemble` with --ensemble
        members), decode settings, problem, vocabularies, shortlist and reverse model."""
        return cls(
            run.decode_hparams, run.problem, run.vocabularies,
            lambda precision: run.with_settings(precision=precision).restore_model(), token_filter=run.token_filter(),
            shortlists=lambda settings: run.with_settings(**dataclasses.asdict(settings)).shortlist,
            reverse=(lambda: _scoring_module(run.reverse_run)) if run.reverse_run else None,
            checkpoint_paths=run.checkpoints, tune_process=tune_process, default_stop_alpha=run.default_stop_alpha,
        )

    @classmethod
    def from_model(cls, model, vocabularies, problem=None, settings: DecodeHParams | None = None, shortlist_table=None,
                   tune_process: bool = True) -> "DecodingEngine":
        """The engine of a Keras `Transformer` in memory and its `Vocabularies`; with the
        `problem`, its constraints and output form; `shortlist_table` (a `Shortlist`) for the
        settings that ask for a shortlist (the trainer passes its run's)."""
        from t2t_keras.models.factory import in_precision
        from t2t_keras.system import decode_precision

        def shortlists(settings):
            if settings.shortlist and shortlist_table is None:
                raise UsageError("shortlist needs the table a trainer's run dir holds (shortlist.npz): use "
                                 "Translator.from_preset(RUN_DIR).")
            if not settings.shortlist:
                return None
            return shortlist_table.limited(settings.shortlist, settings.shortlist_frequent)

        settings = settings or (problem.decode_settings() if problem is not None else DecodeHParams())
        return cls(decode_precision(settings), problem, vocabularies, lambda precision: in_precision(model, precision),
                   token_filter=problem.token_filter(vocabularies) if problem is not None else None,
                   shortlists=shortlists, tune_process=tune_process)

    @property
    def model(self):
        """The model that decodes in the default precision."""
        return self._model(self.settings.precision)

    def window_translator(self, settings: DecodeHParams, n_best: int, log_probs: bool, alignments: bool = False):
        """(lines, line numbers, on_lines(count), prefixes=None, avoids=None, constraints=None) ->
        (each line's hypotheses, repairs): `prefixes`, `avoids` and `constraints`, each line's
        prefix, avoided terms and terms that must appear;
        with `alignments`, each hypothesis's word alignment (`alignment.attention_links`: the
        cross-attention of settings.alignment_layer; an ensemble's first member's). A multilingual
        model's lines get their target language's token (`data.target_languages`): settings.target_language,
        or the token a line starts with; alignments and markup index the line without it."""
        target_languages.check_language(self._languages, settings.target_language)  # before any line
        module = self.search_module(settings)

        def translate(lines, numbers, on_lines, prefixes=None, avoids=None, constraints=None):
            steering = None
            if prefixes is not None or avoids is not None or constraints is not None:
                none = [None] * len(lines)
                steering = Steering(self.target_pieces, prefixes or none, avoids or none, constraints or none)
            asked = self._line_languages(lines, settings, lambda i: f"line {numbers[i] + 1}")
            plain = [text for _, text in asked]
            marked = [markup.parse(line, number + 1) for line, number in zip(plain, numbers)] if settings.markup else None
            texts = [m.text for m in marked] if marked is not None else plain
            inputs = [target_languages.model_input(language, text) for (language, _), text in zip(asked, texts)]
            outputs = translate_lines(module, inputs, n_best, log_probs, line_numbers=numbers, on_lines=on_lines,
                                      batching=settings, steering=steering)
            if alignments or marked is not None:
                outputs = self._aligned(inputs, outputs, settings, [int(bool(language)) for language, _ in asked])
            if marked is not None:  # the tags put back by the alignments (kept on the hypotheses only if asked)
                outputs = [[h._replace(text=markup.restore(m, h.text, h.alignment), alignment=h.alignment if alignments else None)
                            for h in hypotheses] for m, hypotheses in zip(marked, outputs)]
            return postprocess(self.problem, texts, outputs) if self.problem is not None else (outputs, 0)

        return translate

    @property
    def _languages(self) -> tuple[str, ...]:
        return self.problem.target_languages if self.problem is not None else ()

    def _line_languages(self, lines: list[str], settings: DecodeHParams, describe) -> list[tuple[str, str]]:
        """(target language, text) of each line (`target_languages.line_languages`)."""
        return target_languages.line_languages(lines, self._languages, settings.target_language, describe)

    def _aligned(self, lines: list[str], outputs: list, settings: DecodeHParams, tokens: list[int]) -> list:
        """`outputs` (each line's hypotheses) with their word alignments, over each line's words
        after its first `tokens[i]` (a language token)."""
        pairs = [(line, h.text) for line, hypotheses in zip(lines, outputs) for h in hypotheses]
        key = (settings.precision, settings.alignment_layer)
        if key not in self._attention:
            model = self._model(settings.precision)
            self._attention[key] = CrossAttention(getattr(model, "models", [model])[0], settings.alignment_layer)  # an Ensemble's first
        attention = self._attention[key]
        links = iter(attention_links(attention.model, self.vocabularies, [s for s, _ in pairs], [t for _, t in pairs],
                                     settings.alignment_layer, heads=() if settings.alignment_head < 0 else (settings.alignment_head,),
                                     batch_size=settings.sentences_per_batch, attention=attention))
        return [[h._replace(alignment=tuple(sorted(((source - skip, target) for source, target in next(links) if source >= skip),
                                                   key=lambda link: (link[1], link[0])))) for h in hypotheses]
                for hypotheses, skip in zip(outputs, tokens)]

    @functools.cached_property
    def target_pieces(self) -> TargetPieces:
        """The target vocabulary's pieces as text, for prefixes and avoided terms (made on first use)."""
        return TargetPieces(self.vocabularies.target)

    def score(self, sources: list[str], targets: list[str], settings: DecodeHParams) -> list[float]:
        inputs = [target_languages.model_input(*asked)
                  for asked in self._line_languages(sources, settings, lambda i: f"source {i}")]
        return score_lines(self.search_module(settings), inputs, targets, batching=settings)

    def search_module(self, settings: DecodeHParams):
        """The SearchModule of `settings`, made on first use (its graphs traced at its first call)."""
        from t2t_keras.decoding.search_module import SearchModule
        from t2t_keras.system import decode_precision

        key = dataclasses.replace(settings, **{name: getattr(self.settings, name) for name in CALL_SETTINGS})
        if key.kernel_choices == self.settings.kernel_choices:  # the defaults' choices, as `settings` reports them
            key = dataclasses.replace(key, kernel_choices=self._asked_choices)  # chosen again at other sizes
        if key not in self._modules:
            # The defaults' precision was decided with them (an export's run keeps bf16); a call's is decided here.
            decoded = key if key.precision == self.settings.precision else decode_precision(key)
            model = self._model(decoded.precision)
            kernels = self._chosen_kernels(model, decoded)
            module = SearchModule(model, self.vocabularies, dataclasses.replace(decoded, kernel_choices=kernels.setting()),
                                  kernels, self.token_filter, self.problem, self._shortlists(decoded))
            module.reverse = self._reverse
            module.checkpoint_paths = list(self.checkpoint_paths)
            self._modules[key] = module
        return self._modules[key]

    def _chosen_kernels(self, model, settings: DecodeHParams) -> kernel_choices.DecodeKernels:
        """The kernels of a search at `settings`, chosen once per size, precision and forced choices."""
        rows = search_rows(settings)
        key = (settings.precision, rows, settings.kernel_choices, settings.int8_logits and not settings.sampling)
        if key not in self._kernels:
            self._kernels[key] = kernel_choices.choose(
                model.softmax_projection, rows, kernel_choices.forced_choices(settings.kernel_choices),
                int8_logits=key[3], attention=_attention_shape(model))
        return self._kernels[key]

    def _model(self, precision: str):
        if precision not in self._models:
            self._models[precision] = self._restore(precision)
        return self._models[precision]


def search_rows(settings: DecodeHParams) -> int:
    """The hypotheses a decode step of one search part holds at most: what its kernels are timed at."""
    from t2t_keras.system import decoding_parts

    parts = decoding_parts(settings.parallel_parts)
    return -(-settings.sentences_per_batch // parts) * settings.beam_size


def export_search_module(run):
    """The SearchModule an export saves: a `TrainedRun`'s model (resolved for export), TensorFlow's
    ops only (the step product's orientation timed here, or forced by the run's kernel_choices,
    whose native values, those of decoding in a process such as `Translator.settings` reports,
    give way to the graph's; int8_logits refused in one line)."""
    from absl import logging

    from t2t_keras.decoding.search_module import SearchModule

    settings = run.decode_hparams
    forced = kernel_choices.forced_choices(settings.kernel_choices)
    in_process_only = {name: value for name, value in forced.items() if value in kernel_choices.NATIVE_VALUES}
    if in_process_only:
        logging.info("Exporting with TensorFlow's ops in place of %s (native kernels run in a decoding process only).",
                     ", ".join(f"{name}={value}" for name, value in in_process_only.items()))
    model = run.restore_model()
    kernels = kernel_choices.choose(model.softmax_projection, search_rows(settings),
                                    {name: value for name, value in forced.items() if name not in in_process_only},
                                    int8_logits=settings.int8_logits, in_process=False, attention=_attention_shape(model))
    module = SearchModule(model, run.vocabularies, dataclasses.replace(settings, kernel_choices=kernels.setting()),
                          kernels, run.token_filter(), run.problem, run.shortlist)
    module.checkpoint_paths = run.checkpoints
    return module


def _attention_shape(model) -> tuple[int, int]:
    """(heads, depth per head) of the model's attention (an ensemble's first member's)."""
    return model.hparams.num_heads, model.hparams.key_depth


def _scoring_module(run):
    """A reverse model's module: it only scores (score_ids), so its graph kernels are never timed."""
    from t2t_keras.decoding.search_module import SearchModule

    return SearchModule(run.restore_model(), run.vocabularies, run.decode_hparams, kernel_choices.GRAPH_ONLY,
                        run.token_filter(), run.problem)

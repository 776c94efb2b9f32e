"""An export loaded into this process, as the Python API decodes it (`t2t_keras.Translator.from_preset(EXPORT_DIR)`):
the export's signatures called on batches of like length, TensorFlow and tensorflow_text only;
the Translator's backend for an export, as `decoding/engine.py` is for a run dir.

Its decode settings were fixed when it was exported (its metadata lists them): a call may
change the batch size, not what the graphs do. Outputs are the model's text (a parsing
export gives linearised trees, not repaired ones).
"""

from __future__ import annotations

import dataclasses
import os

from t2t_keras import files
from t2t_keras.data import target_languages
from t2t_keras.data.tokenizers import Vocabularies, Vocabulary
from t2t_keras.decoding.controls import contains_term
from t2t_keras.decoding.hypothesis import EMPTY, Hypothesis
from t2t_keras.decoding.line_decoding import n_best_hypotheses, padded_batch, sorted_batches
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams, replace_fields
from t2t_keras.serving.exporter import METADATA_FILE, VOCAB_ASSETS

# What a call may change on an export: how many sentences go into one call of its signatures, and
# the target language a multilingual export's signatures take as an input.
CALL_SETTINGS = ("sentences_per_batch", "batch_tokens", "target_language")


def holds_export(path: str) -> bool:
    """Whether `path` is an export: a SavedModel, or a directory of numbered versions of one."""
    return files.isfile(os.path.join(path, "saved_model.pb")) or bool(_versions(path))


class LoadedExport:
    """An export's signatures with its vocabularies and decode settings (from its metadata).

    Args:
      export_dir: t2t-keras-exporter's directory (its highest version) or a version directory.
      settings: batch settings (`CALL_SETTINGS`) for every call; any other must equal the export's.
      source: what a bad setting's one line names (the Python method it was given to).
    """

    problem = None  # outputs are the model's text
    model = None  # no Keras model: the graphs only
    default_stop_alpha = None  # its search is fixed, checked when it was exported

    def __init__(self, export_dir: str, settings: dict | None = None, source: str = "from_preset"):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

        self.path = _version_dir(export_dir)
        self.saved_model = tf.saved_model.load(self.path)
        source, target = (os.path.join(self.path, "assets", name) for name in VOCAB_ASSETS)
        self.source_vocabulary = Vocabulary.load(source)
        self.target_vocabulary = Vocabulary.load(target) if files.isfile(target) else self.source_vocabulary
        self.vocabularies = Vocabularies(self.source_vocabulary, self.target_vocabulary)
        metadata_path = os.path.join(self.path, METADATA_FILE)
        # What the export does (problem, checkpoint, decode settings baked in); {} for an export of an older version.
        self.metadata = (files.read_json(metadata_path, "export the run again (t2t-keras-exporter).")
                         if files.isfile(metadata_path) else {})
        for name, vocabulary in zip(VOCAB_ASSETS, (self.source_vocabulary, self.target_vocabulary)):
            vocabulary.check_against(self.metadata.get("vocabularies", {}).get(name, {}), "", metadata_path)
        self.target_languages = tuple(self.metadata.get("target_languages", ()))
        self.multilingual = len(self.target_languages) > 1  # its text signatures take target_languages
        self.settings = DecodeHParams(**self.metadata.get("decode_hparams", {}))
        self.settings = self.checked(replace_fields(self.settings, settings or {}, source))
        self.checkpoint_paths = [self.path]

    def checked(self, settings: DecodeHParams) -> DecodeHParams:
        """`settings`, if they differ from the export's only in `CALL_SETTINGS`; else a UsageError."""
        asked = [f"{f.name}={getattr(settings, f.name)!r} (it has {getattr(self.settings, f.name)!r})"
                 for f in dataclasses.fields(settings)
                 if f.name not in CALL_SETTINGS and getattr(settings, f.name) != getattr(self.settings, f.name)]
        if asked:
            raise UsageError(f"{self.path} is an export, whose graphs fix its decode settings: {', '.join(asked)}; "
                             "decode with other settings from the run dir, or export again with them.")
        return settings

    def window_translator(self, settings: DecodeHParams, n_best: int, log_probs: bool, alignments: bool = False):
        """(lines, line numbers, on_lines) -> (each line's `n_best` hypotheses, 0 repairs), as
        the run dir's: lines of like length searched together, `settings`' batch sizes."""
        import tensorflow as tf

        self.checked(settings)
        if alignments or settings.markup:
            raise UsageError(f"{self.path} is an export: word alignments{' (which markup needs)' if settings.markup else ''} "
                             "read a model's attention in a decoding process (Translator.from_preset(RUN_DIR)).")
        if not 1 <= n_best <= self.settings.beam_size:
            raise UsageError(f"n_best={n_best}: choose 1 to this export's beam_size ({self.settings.beam_size}).")

        target_languages.check_language(self.target_languages, settings.target_language)  # before any line

        def translate(lines, numbers, on_lines, prefixes=None, avoids=None, constraints=None):
            if any(avoids or []):
                raise UsageError(f"{self.path} is an export: avoided terms are banned by decoding in a process "
                                 "(Translator.from_preset(RUN_DIR)); a SavedModel has no avoid input.")
            asked = self._line_languages(lines, settings, lambda i: f"line {numbers[i] + 1}")
            lines = [text for _, text in asked]
            languages = [language for language, _ in asked]
            tagged = [target_languages.model_input(*each) for each in asked]  # as the model reads them
            encoded, row_batches = sorted_batches(tagged, self.source_vocabulary, settings, on_lines)
            if any(constraints or []):
                if n_best != 1 or "translate_constrained" not in self.saved_model.signatures:
                    raise UsageError(f"{self.path}: an export holds terms in its outputs by its translate_constrained "
                                     "signature, the best output only" + (
                                         "" if "translate_constrained" in self.saved_model.signatures
                                         else " (this export predates it: export again)") + ".")
                return self._best(lines, languages, row_batches, log_probs, on_lines, prefixes or [None] * len(lines),
                                  constraints), 0
            if any(prefixes or []):
                if n_best != 1 or "translate_prefix" not in self.saved_model.signatures:
                    raise UsageError(f"{self.path}: an export decodes a prefix by its translate_prefix signature, the "
                                     "best output only" + ("" if "translate_prefix" in self.saved_model.signatures else
                                                           " (this export predates it: export again)") + ".")
                return self._best(lines, languages, row_batches, log_probs, on_lines, prefixes), 0
            if n_best == 1:  # serving_default: the search that stops once the best is settled, log P with it
                return self._best(lines, languages, row_batches, log_probs, on_lines), 0

            def search(rows):
                found = self.saved_model.signatures["translate_ids"](input_ids=tf.constant(padded_batch([encoded[i] for i in rows])))
                return found["ids"].numpy(), found["scores"].numpy()

            rescore = (lambda sources, targets: self._scores(sources, targets, settings)) if log_probs else None
            cap = self.settings.max_input_tokens
            outputs = n_best_hypotheses(tagged, row_batches, search, self.target_vocabulary.decode, rescore, n_best,
                                        on_batch=lambda rows: on_lines(len(rows)),
                                        truncated=lambda i: bool(cap) and len(encoded[i]) > cap)
            return outputs, 0

        return translate

    def _line_languages(self, lines: list[str], settings: DecodeHParams, describe) -> list[tuple[str, str]]:
        """(target language, text) of each line (`target_languages.line_languages`)."""
        return target_languages.line_languages(lines, self.target_languages, settings.target_language, describe)

    def _best(self, lines: list[str], languages: list[str], row_batches, log_probs: bool, on_lines, prefixes=None,
              constraints=None) -> list[list[Hypothesis]]:
        """Each line's best output through serving_default (translate_prefix with `prefixes`,
        translate_constrained with `constraints` too), a batch of `row_batches` a call; a
        multilingual export's with each line's target language of `languages`."""
        import tensorflow as tf

        outputs = [[EMPTY] for _ in lines]
        for rows in row_batches:
            inputs = {"inputs": tf.constant([lines[i] for i in rows], tf.string)}
            if self.multilingual:
                inputs["target_languages"] = tf.constant([languages[i] for i in rows], tf.string)
            if constraints is not None:
                terms = [[t for t in constraints[i] or [] if t.strip()] for i in rows]
                width = max([len(t) for t in terms] + [1])
                found = self.saved_model.signatures["translate_constrained"](
                    **inputs, prefixes=tf.constant([prefixes[i] or "" for i in rows], tf.string),
                    constraints=tf.constant([t + [""] * (width - len(t)) for t in terms], tf.string))
            elif prefixes is None:
                found = self.saved_model.signatures["serving_default"](**inputs)
            else:
                found = self.saved_model.signatures["translate_prefix"](
                    **inputs, prefixes=tf.constant([prefixes[i] or "" for i in rows], tf.string))
            for i, text, score, log_prob, truncated in zip(rows, found["outputs"].numpy(), found["scores"].numpy(),
                                                           found["log_probs"].numpy(), found["truncated"].numpy()):
                text = text.decode("utf-8")
                missing = tuple(t for t in (constraints[i] or [] if constraints else []) if t.strip() and not contains_term(text, t))
                outputs[i] = [Hypothesis(text, float(log_prob) if log_probs else None, float(score), bool(truncated),
                                         missing=missing)]
            on_lines(len(rows))
        return outputs

    def score(self, sources: list[str], targets: list[str], settings: DecodeHParams) -> list[float]:
        """log P(target | source) of each pair, EOS included, `settings.sentences_per_batch` pairs a call."""
        asked = self._line_languages(sources, settings, lambda i: f"source {i}")
        return self._scores([target_languages.model_input(*each) for each in asked], targets, settings)

    def _scores(self, sources: list[str], targets: list[str], settings: DecodeHParams) -> list[float]:
        """score of sources as the model reads them (a multilingual model's tagged: its languages "")."""
        import tensorflow as tf

        scores = []
        for start in range(0, len(sources), settings.sentences_per_batch):
            end = start + settings.sentences_per_batch
            inputs = {"inputs": tf.constant(sources[start:end], tf.string), "targets": tf.constant(targets[start:end], tf.string)}
            if self.multilingual:
                inputs["target_languages"] = tf.constant([""] * len(sources[start:end]), tf.string)
            result = self.saved_model.signatures["score"](**inputs)
            scores.extend(float(log_prob) for log_prob in result["log_probs"].numpy())
        return scores


def _versions(export_dir: str) -> list[str]:
    """The complete numbered versions in `export_dir`."""
    if not files.isdir(export_dir):
        return []
    return [name for name in files.listdir(export_dir)
            if name.isdigit() and files.isfile(os.path.join(export_dir, name, "saved_model.pb"))
            and files.is_complete_dir(os.path.join(export_dir, name))]


def _version_dir(export_dir: str) -> str:
    """`export_dir` if it holds a SavedModel, else its highest numbered version."""
    if files.isfile(os.path.join(export_dir, "saved_model.pb")):
        return export_dir
    versions = _versions(export_dir)
    if not versions:
        raise UsageError(f"{export_dir} holds no SavedModel and no numbered version of one; export first (t2t-keras-exporter).")
    return os.path.join(export_dir, max(versions, key=int))

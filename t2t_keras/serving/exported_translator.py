"""The Python API over an exported SavedModel: the same `translate` and `score` as
`Translator.from_run_dir`, from an export directory (TensorFlow and tensorflow_text only).

    translator = ExportedTranslator("out/demo/export")          # its highest version, or a version dir
    translator.translate(["A dog runs in the snow."])           # ['Ein Hund rennt im Schnee.']
    translator.translate(["A dog runs."], n_best=2)             # [[Hypothesis(text, log_prob, score), ...]]
    translator.score(["A dog runs."], ["Ein Hund rennt."])      # [log P(target | source)]
    translator.metadata["decode_hparams"]                       # {"beam_size": 4, "alpha": 1.4, ...}

Outputs are the model's text (a parsing export gives linearised trees, not repaired ones).
"""

from __future__ import annotations

import json
import os

from t2t_keras import files
from t2t_keras.data.tokenizers import Vocabulary
from t2t_keras.decoding.batch_decoding import n_best_hypotheses, padded_batch, require_sentence_list
from t2t_keras.errors import UsageError
from t2t_keras.serving.exporter import METADATA_FILE, VOCAB_ASSETS


class ExportedTranslator:
    """Translates and scores with the signatures of an export written by t2t-keras-exporter."""

    def __init__(self, export_dir: str):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

        self.path = _version_dir(export_dir)
        self.saved_model = tf.saved_model.load(self.path)
        source, target = (os.path.join(self.path, "assets", name) for name in VOCAB_ASSETS)
        self.source_vocabulary = Vocabulary.load(source)
        self.target_vocabulary = Vocabulary.load(target) if files.isfile(target) else self.source_vocabulary
        metadata_path = os.path.join(self.path, METADATA_FILE)
        # What the export does (problem, checkpoint, decode settings baked in); {} for an export of an older version.
        self.metadata = {}
        if files.isfile(metadata_path):
            self.metadata = json.loads(files.read_text(metadata_path))

    def translate(self, sentences: list[str], n_best: int | None = None):
        """The best output of each sentence, or with `n_best`, its n best `Hypothesis`es."""
        import tensorflow as tf

        require_sentence_list(sentences, "translate")
        sentences = list(sentences)
        if not n_best:
            outputs = self.saved_model.signatures["serving_default"](inputs=tf.constant(sentences, tf.string))["outputs"]
            return [text.decode("utf-8") for text in outputs.numpy()]
        rows = [i for i, sentence in enumerate(sentences) if sentence.strip()]

        def search(rows):
            ids = padded_batch([self.source_vocabulary.encode(sentences[i], add_eos=True) for i in rows])
            found = self.saved_model.signatures["translate_ids"](input_ids=tf.constant(ids))
            return found["ids"].numpy(), found["scores"].numpy()

        return n_best_hypotheses(sentences, [rows] if rows else [], search, self.target_vocabulary.decode, self.score, n_best)

    def score(self, sources: list[str], targets: list[str]) -> list[float]:
        """log P(target | source) of each pair, EOS included."""
        import tensorflow as tf

        require_sentence_list(sources, "score")
        require_sentence_list(targets, "score")
        if len(sources) != len(targets):
            raise ValueError(f"score needs as many targets as sources, got {len(targets)} and {len(sources)}.")
        if not sources:
            return []
        result = self.saved_model.signatures["score"](
            inputs=tf.constant(list(sources), tf.string), targets=tf.constant(list(targets), tf.string)
        )
        return [float(log_prob) for log_prob in result["log_probs"].numpy()]


def _version_dir(export_dir: str) -> str:
    """`export_dir` if it holds a SavedModel, else its highest numbered version."""
    if files.isfile(os.path.join(export_dir, "saved_model.pb")):
        return export_dir
    versions = [name for name in files.listdir(export_dir) if name.isdigit() and files.is_complete_dir(os.path.join(export_dir, name))] \
        if files.isdir(export_dir) else []
    if not versions:
        raise UsageError(f"{export_dir} holds no SavedModel and no numbered version of one; export first (t2t-keras-exporter).")
    return os.path.join(export_dir, max(versions, key=int))


"""SavedModels for TensorFlow Serving: text in, translation out.

    export_dir/
      <version>/                        an integer, as TF Serving expects (default: the step)
        saved_model.pb, variables/
        assets/vocab.spm.model          the SentencePiece model, for clients that tokenise (the
                                        source's, beside target.spm.model when not shared)
        assets.extra/tf_serving_warmup_requests
        assets.extra/t2t_keras_export.json   what the graph does: problem, checkpoint, the decode
                                        settings baked in (beam, alpha, max_input_tokens, ...)

Signatures (all TensorFlow core and tensorflow_text ops, so the stock model server runs
them; no Python in the graph):
  serving_default  inputs [B] string -> outputs [B] string, scores [B] float32, log_probs [B]
                   float32, truncated [B] bool (the input was longer than max_input_tokens and
                   was cut to it)
  translate_ids    input_ids [B, S] int32 (EOS-terminated, 0-padded) -> ids [B, K, L],
                   scores [B, K], lengths [B, K]
  score            inputs [B], targets [B] string -> log_probs [B], lengths [B] (target tokens
                   with EOS)
  translate_prefix inputs [B], prefixes [B] string ("" for none) -> as serving_default, each
                   output starting with its prefix (its pieces forced and scored; a partial last
                   word completed by a piece that starts it as typed)
  translate_constrained
                   inputs [B], prefixes [B], constraints [B, M] string ("" pads) -> as
                   translate_prefix, each output also holding every term of its row (dynamic
                   beam allocation, as the decoder's --constraints_file)

A model of several target languages (a multilingual problem's) takes target_languages [B]
string in serving_default, score, translate_prefix and translate_constrained (its metadata lists
the languages): each input's language, or "" for an input that starts with its token (>>de<<).

Two quantities, one name each, as everywhere in the package (the decoder's --with_scores and
--with_log_probs, `Hypothesis.score` and `.log_prob`): scores = what beam search ranked by,
log P / ((5 + length) / 6) ** alpha; log_probs = log P(output | input), EOS included.

A version is written under a temporary name and renamed when complete, so a server
watching export_dir never sees half an export, and an existing version is never replaced.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf

from t2t_keras import extras, files
from t2t_keras.checkpoints import checkpoint_step
from t2t_keras.data import target_languages
from t2t_keras.errors import UsageError

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
METADATA_FILE = os.path.join("assets.extra", "t2t_keras_export.json")
VOCAB_ASSETS = ("vocab.spm.model", "target.spm.model")

# Requests TF Serving replays at load time, so the first real request does not pay for
# graph initialisation: one short sentence, one long one, and a batch.
WARMUP_BATCHES = (
    ["Hello."],
    ["A man in a blue shirt is standing on a ladder cleaning windows, while two children watch from the street."],
    ["Two dogs play in the snow.", "A woman is reading a book.", "The children are laughing.", "It rains."] * 2,
)


def export_saved_model(module, export_dir: str, version: int) -> str:
    """Writes a `SearchModule`'s signatures as `export_dir/<version>`; returns that path. The
    module must hold TensorFlow's ops only (`engine.export_search_module` builds one): a module
    with native kernels is refused in one line before anything is written."""
    if module.kernels.native_choices:
        raise UsageError(f"export_saved_model: this SearchModule runs native kernels ({', '.join(module.kernels.native_choices)}), "
                         "which a SavedModel cannot hold; export the module of decoding.engine.export_search_module.")
    final_path = new_version_path(export_dir, version)
    files.makedirs(export_dir)
    # Written as .incomplete.<version>: TF Serving ignores a directory whose name is not a number.
    with files.atomic_path(final_path) as temporary:
        # First: without the [serving] extra the export stops here, not after the save.
        write_warmup_requests(os.path.join(temporary, WARMUP_FILE))
        # Concrete functions, which saving does not trace again; serving_default is TF Serving's default.
        # A model of several target languages: each text signature takes the inputs' target_languages too.
        to = "_to" if _multilingual(module) else ""
        signatures = {
            "serving_default": getattr(module, "translate_text" + to).get_concrete_function(),
            "translate_ids": module.translate_ids.get_concrete_function(),
            "score": getattr(module, "score_text" + to).get_concrete_function(),
            "translate_prefix": getattr(module, "translate_prefix_text" + to).get_concrete_function(),
            "translate_constrained": getattr(module, "translate_constrained_text" + to).get_concrete_function(),
        }
        # Only what the signatures use is saved: the variables they read and the SentencePiece
        # resources (not the SearchModule, whose every tf.function would be traced again, the
        # sampling one too). `variables`, as in the exports of keras.export.ExportArchive.
        variables = {id(v): v for function in signatures.values() for v in function.variables}
        tokenizers = {id(t): t for t in (module.source_tokenizer, module.target_tokenizer)}
        served = tf.train.Checkpoint(variables=list(variables.values()), tokenizers=list(tokenizers.values()))
        # Served graphs are never differentiated: tracing the kernels' hand-written gradients
        # into the SavedModel would double the export's time for nothing.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        tf.saved_model.save(served, temporary, signatures=signatures, options=options)
        # The graph holds the SentencePiece models themselves; these copies are for clients
        # that tokenise on their side and call translate_ids.
        files.makedirs(os.path.join(temporary, "assets"))
        vocabularies = module.vocabularies
        for name, vocabulary in zip(VOCAB_ASSETS, (vocabularies.source, None if vocabularies.shared else vocabularies.target)):
            if vocabulary is not None:
                files.write_bytes_directly(os.path.join(temporary, "assets", name), vocabulary.model_proto)
        files.write_bytes_directly(os.path.join(temporary, METADATA_FILE), (json.dumps(export_metadata(module, version), indent=2) + "\n").encode())
    return final_path


def _multilingual(module) -> bool:
    return module.problem is not None and module.problem.multilingual


def export_metadata(module, version: int) -> dict:
    """What a client needs to know about an export: where it comes from and how it searches."""
    languages = list(module.problem.target_languages) if module.problem is not None else []
    metadata = {
        "version": version,
        "problem": module.problem.name if module.problem is not None else None,
        "checkpoint": module.checkpoint_paths[0] if module.checkpoint_paths else None,
        "checkpoints": list(module.checkpoint_paths),  # every member of an ensemble, the first's first
        "decode_hparams": dataclasses.asdict(module.decode_hparams),
        "kernel_choices": module.kernels.record(),  # the step product's orientation as timed on the exporting machine
        "vocabularies": {name: {"sha256": vocabulary.sha256, "pieces_sha256": vocabulary.pieces_sha256, "size": vocabulary.size}
                         for name, vocabulary in zip(VOCAB_ASSETS, module.vocabularies) if module.vocabularies is not None
                         and (name == VOCAB_ASSETS[0] or not module.vocabularies.shared)},
        "signatures": {
            "serving_default": "inputs [B] string -> outputs [B] string, scores [B] float32, log_probs [B] float32, "
                               "truncated [B] bool",
            "translate_ids": "input_ids [B, S] int32 -> ids [B, K, L] int32, scores [B, K] float32, lengths [B, K] int32",
            "score": "inputs [B], targets [B] string -> log_probs [B] float32, lengths [B] int32",
            "translate_constrained": "inputs [B], prefixes [B], constraints [B, M] string ('' pads) -> as translate_prefix, "
                                     "each output holding every term of its row",
            "translate_prefix": "inputs [B], prefixes [B] string ('' for none) -> as serving_default, each output "
                                "starting with its prefix (a partial last word completed)",
            "scores": "what beam search ranked by: log P / ((5 + length) / 6) ** alpha",
            "log_probs": "log P(output | input), EOS included",
        },
        "target_languages": languages,  # several: the text signatures take target_languages [B] string too
    }
    if _multilingual(module):
        metadata["signatures"]["target_languages"] = (
            f"[B] string, an input of serving_default, score, translate_prefix and translate_constrained: each "
            f"input's target language, one of {', '.join(languages)}, or '' for an input that starts with its token "
            f"({target_languages.token(languages[0])}); translate_ids' inputs start with their token")
    return metadata


def new_version_path(export_dir: str, version: int) -> str:
    """`export_dir/<version>`; a UsageError if the version is invalid or already exported."""
    if version < 0:
        raise UsageError(f"--version={version}: TF Serving versions are non-negative integers.")
    path = os.path.join(export_dir, str(version))
    if files.exists(path):
        raise UsageError(
            f"{path} already exists and is never overwritten; pass --version=N with a new N "
            "(TF Serving serves the highest) or remove it."
        )
    return path


def write_warmup_requests(path: str) -> None:
    """TF Serving's warmup file: PredictionLog records, each wrapping a serving_default PredictRequest."""
    extras.require("serving")
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    files.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for sentences in WARMUP_BATCHES:
            request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(signature_name="serving_default"))
            request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(sentences, dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def export_run(run, export_dir: str, version: int | None = None) -> str:
    """Exports a `TrainedRun`'s checkpoint (its latest, or the one it names) as
    `export_dir/<version>` (default: the checkpoint's step); returns the version's path. Inputs
    are cut to decode_hparams.max_input_tokens, by default the model's max_length. The precision
    is the serving machine's (`TrainedRun.for_export`)."""
    from t2t_keras.decoding.engine import export_search_module

    run = run.for_export()
    checkpoint = run.checkpoints[0]
    if version is None:
        version = checkpoint_step(checkpoint)
    new_version_path(export_dir, version)  # fail before the slow part
    if not run.decode_hparams.max_input_tokens:  # a served request costs at most what the model was trained on
        run = run.with_settings(max_input_tokens=run.run_dir.hparams().max_length)
    return export_saved_model(export_search_module(run), export_dir, version)

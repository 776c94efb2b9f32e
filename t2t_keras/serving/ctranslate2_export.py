"""CTranslate2 models of trained runs: OpenNMT's C++ inference engine, for CPU deployments.

    t2t-keras-exporter --format=ctranslate2 --output_dir=out/demo/train_avg --export_dir=out/demo/ct2 \
        --quantization=int8

writes the directory `ctranslate2.Translator` loads:

    export_dir/
      model.bin, config.json            the weights (quantised as asked) and the special tokens
      shared_vocabulary.json            the SentencePiece pieces (source_/target_vocabulary.json
                                        when the run has two vocabularies)
      source.spm.model [target.spm.model]  the run's SentencePiece model(s), to tokenise with
      vmap.txt                          the run's shortlist as CTranslate2's vocabulary map
                                        (translate_batch(..., use_vmap=True)), if the run has one
      t2t_keras_export.json             where it comes from and the decode settings to use

The model is the same function: post- or pre-norm blocks, scaled embeddings, the paper's
interleaved sinusoids (or a learned table) given to CTranslate2 as an explicit position table,
shared or separate vocabularies, token 0 as the decoder's start and EOS appended to sources.
A model of several target languages reads its target's token at the start of the source, as
OPUS-MT's models do in CTranslate2: tokenise ">>de<< A dog runs." (the metadata lists the tokens).
What CTranslate2 cannot express is refused in one line: the parsers' copy positions, and
decoding constraints (a problem's token filter) unless they are turned off.

The search is CTranslate2's own: the same GNMT length penalty ((5 + |Y|) / 6)^alpha with |Y|
counting EOS, but the K best of K x V extensions per step (ours keeps K alive and K finished
hypotheses from 2K candidates) and it stops a sentence once its best beam has finished (ours
once no alive hypothesis can still beat a finished one): most outputs are identical, a few
differ (tests/serving/test_ctranslate2_export.py measures how many).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile

import numpy as np

from t2t_keras import extras, files
from t2t_keras.data import target_languages
from t2t_keras.errors import UsageError
from t2t_keras.token_ids import EOS_ID, START_ID, UNK_ID

QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16", "int8_bfloat16", "float16", "int8_float16", "int16")
SINUSOID_POSITIONS = 2048  # rows of the position table given to CTranslate2 (its own default maximum input is 1024)
DEFAULT_VMAP_PER_SOURCE = 20  # shortlist=20 with 1000 frequent measured best on the demo (docs/decoding.md, "Vocabulary shortlist")
METADATA_FILE = "t2t_keras_export.json"


def export_run(run, export_dir: str, quantization: str = "float32") -> str:
    """Writes a CTranslate2 model directory of a `TrainedRun`'s checkpoint (its latest, or the
    one it names) at `export_dir` (refused if it exists); returns its path."""
    from t2t_keras.checkpoints import restore_model
    from t2t_keras.decoding.shortlist import load_run_shortlist

    if files.exists(export_dir):
        raise UsageError(f"--export_dir={export_dir} already exists and is never overwritten; remove it or choose another.")
    if quantization not in QUANTIZATIONS:
        raise UsageError(f"--quantization={quantization}: CTranslate2 knows {', '.join(QUANTIZATIONS)}.")
    extras.require("ctranslate2")
    import ctranslate2.converters
    problem, vocabularies, decode_hparams = run.problem, run.vocabularies, run.decode_hparams
    if decode_hparams.constrained and run.token_filter() is not None:
        raise UsageError(
            f"{problem.name} decodes under the problem's constraints (a token filter), which CTranslate2 cannot apply; "
            "pass --decode_hparams=constrained=false to export the model unconstrained."
        )
    checkpoint = run.checkpoints[0]
    model, _ = restore_model(run.run_dir, checkpoint)  # float32: CTranslate2 quantises it itself
    spec = model_spec(model, vocabularies)
    per_source = decode_hparams.shortlist or DEFAULT_VMAP_PER_SOURCE
    shortlist = load_run_shortlist(run.run_dir) if files.isfile(run.run_dir.shortlist_path) else None

    class RunConverter(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    files.makedirs(os.path.dirname(files.absolute(export_dir)))
    with tempfile.TemporaryDirectory() as scratch, files.atomic_path(export_dir) as temporary:
        vmap = None
        if shortlist is not None:
            vmap = os.path.join(scratch, "vmap.txt")
            write_vmap(shortlist.limited(per_source, decode_hparams.shortlist_frequent), vocabularies, vmap)
        # The converter writes into a fresh directory of its own; the whole of it appears at
        # export_dir only when complete.
        RunConverter().convert(temporary, vmap=vmap, quantization=quantization, force=True)
        names = ("source.spm.model", None) if vocabularies.shared else ("source.spm.model", "target.spm.model")
        for name, vocabulary in zip(names, (vocabularies.source, vocabularies.target)):
            if name:
                files.write_bytes_directly(os.path.join(temporary, name), vocabulary.model_proto)
        metadata = {
            "problem": problem.name, "checkpoint": checkpoint, "quantization": quantization,
            "vmap": None if vmap is None else {"per_source": per_source, "frequent": decode_hparams.shortlist_frequent},
            "decode_hparams": dataclasses.asdict(decode_hparams),
            # min_decoding_length 0: EOS may come first, as in our search (CTranslate2's default forbids it)
            "translate_batch": {"beam_size": decode_hparams.beam_size, "length_penalty": decode_hparams.alpha,
                                "min_decoding_length": 0},
            # several: each source is tokenised with its target language's token in front (">>de<< A dog runs.")
            "target_languages": {language: target_languages.token(language) for language in problem.target_languages},
        }
        files.write_bytes_directly(os.path.join(temporary, METADATA_FILE), (json.dumps(metadata, indent=2) + "\n").encode())
    return export_dir


def model_spec(model, vocabularies):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights (a Transformer), with
    `vocabularies`' pieces and special tokens."""
    extras.require("ctranslate2")
    from ctranslate2.specs import common_spec, transformer_spec

    hp = model.hparams
    if model.copy_position is not None:
        raise UsageError("copy_position_encoding (the parsers' copy positions) has no CTranslate2 equivalent: "
                         "this model cannot be exported to CTranslate2.")
    if hp.key_depth != hp.value_depth:
        raise UsageError(f"key_depth={hp.key_depth} and value_depth={hp.value_depth} differ; CTranslate2's attention "
                         "needs one depth per head.")
    stack = dict(num_layers=hp.num_hidden_layers, num_heads=hp.num_heads, pre_norm=hp.norm_type == "pre",
                 activation=common_spec.Activation.RELU,
                 head_dim=None if hp.key_depth * hp.num_heads == hp.hidden_size else hp.key_depth)
    spec = transformer_spec.TransformerSpec(transformer_spec.TransformerEncoderSpec(**stack),
                                            transformer_spec.TransformerDecoderSpec(**stack))
    spec.config.layer_norm_epsilon = hp.layer_norm_epsilon
    encoder_positions, decoder_positions = _position_tables(model)
    _set_embeddings(spec.encoder.embeddings[0], model.source_embedding)
    spec.encoder.position_encodings.encodings = encoder_positions
    _set_embeddings(spec.decoder.embeddings, model.target_embedding)
    spec.decoder.position_encodings.encodings = decoder_positions
    spec.decoder.projection.weight = _numpy(model.softmax_projection.embeddings)
    for layer_spec, block in zip(spec.encoder.layer, model.encoder_blocks):
        _set_self_attention(layer_spec.self_attention, block)
        _set_feed_forward(layer_spec.ffn, block)
    for layer_spec, block in zip(spec.decoder.layer, model.decoder_blocks):
        _set_self_attention(layer_spec.self_attention, block)
        _set_cross_attention(layer_spec.attention, block)
        _set_feed_forward(layer_spec.ffn, block)
    if hp.norm_type == "pre":
        _set_layer_norm(spec.encoder.layer_norm, model.encoder_norm)
        _set_layer_norm(spec.decoder.layer_norm, model.decoder_norm)

    source_pieces = vocabularies.source.pieces(range(vocabularies.source.size))
    target_pieces = vocabularies.target.pieces(range(vocabularies.target.size))
    spec.register_source_vocabulary(source_pieces)
    spec.register_target_vocabulary(target_pieces)
    # Token 0 is both padding and the decoder's start symbol (tensor2tensor's convention); the
    # vocabularies have no BOS piece, so the start piece serves as CTranslate2's bos_token too.
    spec.config.unk_token = target_pieces[UNK_ID]
    spec.config.bos_token = target_pieces[START_ID]
    spec.config.eos_token = target_pieces[EOS_ID]
    spec.config.decoder_start_token = target_pieces[START_ID]
    spec.config.add_source_eos = True  # sources end with EOS, as the datagen wrote them
    return spec


def write_vmap(shortlist, vocabularies, path: str) -> None:
    """`shortlist` as CTranslate2's vocabulary map: "source piece<TAB>target pieces" for each
    source token with candidates, and "<TAB>the frequent pieces" (always candidates). CTranslate2
    takes the union over a batch's sources for every sentence of the batch (ours: each
    sentence's own list)."""
    source, target = vocabularies.source, vocabularies.target
    lines = ["\t" + " ".join(target.pieces(t for t in shortlist.frequent.tolist()))]
    for token, candidates in enumerate(shortlist.candidates.tolist()):
        kept = [t for t in candidates if t > UNK_ID]
        if kept:
            lines.append(source.pieces([token])[0] + "\t" + " ".join(target.pieces(kept)))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def _numpy(variable) -> np.ndarray:
    return np.asarray(variable.numpy(), np.float32)


def _transposed(dense) -> np.ndarray:
    """A Keras Dense kernel [in, out] as CTranslate2's [out, in] weight."""
    return np.ascontiguousarray(_numpy(dense.kernel).T)


def _set_embeddings(spec, embedding) -> None:
    spec.weight = _numpy(embedding.embeddings)  # scaled by sqrt(d_model) as ours: the spec's scale_embeddings


def _position_tables(model):
    """(encoder, decoder) position tables: a learned table's rows, or the paper's interleaved
    sinusoids of SINUSOID_POSITIONS positions (CTranslate2's built-in sinusoids concatenate)."""
    from t2t_keras.layers.position import SinusoidalPositionEncoding, sinusoids

    tables = []
    for layer in (model.source_position, model.target_position):
        if isinstance(layer, SinusoidalPositionEncoding):
            positions = np.arange(SINUSOID_POSITIONS)
            tables.append(np.asarray(sinusoids(positions, model.hparams.hidden_size, layer.max_wavelength), np.float32))
        else:
            tables.append(_numpy(layer.position_table))
    return tables


def _set_layer_norm(spec, layer_norm) -> None:
    spec.gamma = _numpy(layer_norm.gamma)
    spec.beta = _numpy(layer_norm.beta)


def _set_linear(spec, weight: np.ndarray, bias=None) -> None:
    spec.weight = weight
    if bias is not None:
        spec.bias = _numpy(bias)


def _set_self_attention(spec, block) -> None:
    attention = block.self_attention
    fused = np.concatenate([_transposed(attention.query_dense), _transposed(attention.key_dense),
                            _transposed(attention.value_dense)])
    _set_linear(spec.linear[0], fused)
    _set_linear(spec.linear[1], _transposed(attention.output_dense))
    _set_layer_norm(spec.layer_norm, block.self_attention_residual.layer_norm)


def _set_cross_attention(spec, block) -> None:
    attention = block.cross_attention
    _set_linear(spec.linear[0], _transposed(attention.query_dense))
    _set_linear(spec.linear[1], np.concatenate([_transposed(attention.key_dense), _transposed(attention.value_dense)]))
    _set_linear(spec.linear[2], _transposed(attention.output_dense))
    _set_layer_norm(spec.layer_norm, block.cross_attention_residual.layer_norm)


def _set_feed_forward(spec, block) -> None:
    feed_forward = block.feed_forward
    _set_linear(spec.linear_0, _transposed(feed_forward.inner_dense), feed_forward.inner_dense.bias)
    _set_linear(spec.linear_1, _transposed(feed_forward.output_dense), feed_forward.output_dense.bias)
    _set_layer_norm(spec.layer_norm, block.feed_forward_residual.layer_norm)
